"""Fallback Chains tab: list, editor, toggle, delete. Full page normally, a named partial for HTMX."""

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from access.enums import Notice
from access.selectors import notice_dismissed
from access.services import notice_dismiss
from catalog.enums import Capability, ScopeType
from catalog.models import LlmModel
from catalog.scopes import Scope, scope_choices, scope_label, scope_names, scope_validate
from catalog.selectors import llm_model_list, provider_list
from chains.forms import (
    PAGE_SIZES,
    RESILIENCE_MARKER,
    ChainForm,
    EntryRow,
    ListParams,
    ResilienceDefaultsForm,
    ResilienceFields,
    entries_apply_op,
    entries_from_post,
    knob_views,
    list_params,
    resilience_from_post,
    resilience_from_stored,
)
from chains.models import MAX_ENTRIES, FallbackChain, ResilienceDefaults
from chains.resilience import (
    RESILIENCE_DEFAULTS,
    ResiliencePolicy,
    TimelineStep,
    resilience_effective,
    resilience_timeline,
    resilience_validate,
)
from chains.selectors import (
    DEFAULT_CHAIN_ORDERING,
    ChainWarning,
    chain_get,
    chain_list,
    chain_warnings,
    cost_hint,
    cost_ratio,
    resilience_defaults_effective,
    resilience_defaults_get,
)
from chains.services import (
    chain_create,
    chain_delete,
    chain_set_enabled,
    chain_update,
    resilience_defaults_update,
)
from core.errors import ConflictError, ValidationFailed
from core.htmx import HtmxRequest, current_url_path, current_url_query, htmx_target, wants_partial
from core.permissions import role_required
from core.roles import Role
from core.templatetags.console_tags import query
from core.validators import has_control_characters


def _get_chain(chain_id: int) -> FallbackChain:
    try:
        return chain_get(chain_id=chain_id)
    except FallbackChain.DoesNotExist:
        raise Http404("No such chain.") from None


# ---------- List ----------

# (sort key, header label); None = not sortable.
COLUMNS: tuple[tuple[str | None, str], ...] = (
    ("name", "Name"),
    ("source_model", "Source model"),
    ("chain", "Chain"),
    ("scope", "Scope"),
    ("status", "Status"),
)


# What a header sorts by, where the label alone does not say it.
SORT_TITLES = {"chain": "Sort by the model of the first entry", "status": "Sort by status: Disabled before Active"}


@dataclass(frozen=True)
class ChainRow:
    chain: FallbackChain
    scope: str
    entries_text: str  # short: model names only
    entries_title: str  # full: with provider overrides and position


def _chain_rows(chains: list[FallbackChain]) -> list[ChainRow]:
    names = scope_names((c.scope_type, c.scope_id) for c in chains)
    rows = []
    for chain in chains:
        entries = list(chain.entries.all())
        short = " → ".join(e.model.name for e in entries)
        full = " → ".join(
            f"{i}. {e.model.name} via {e.served_by.name}{' (override)' if e.provider_id else ''}"
            for i, e in enumerate(entries, start=1)
        )
        rows.append(
            ChainRow(
                chain=chain,
                scope=scope_label(chain.scope_type, chain.scope_id, names),
                entries_text=short,
                entries_title=full,
            )
        )
    return rows


def _headers(params: ListParams) -> list[dict[str, Any]]:
    current = params.sort.lstrip("-")
    descending = params.sort.startswith("-")
    headers = []
    for key, label in COLUMNS:
        header: dict[str, Any] = {"key": key, "label": label, "sort": None, "arrow": "", "aria_sort": "", "title": ""}
        if key is not None:
            active = key == current
            # First click sorts ascending; clicking the active column flips it.
            header["sort"] = f"-{key}" if active and not descending else key
            header["title"] = SORT_TITLES.get(key, "")
            if active:
                header["arrow"] = "▼" if descending else "▲"
                header["aria_sort"] = "descending" if descending else "ascending"
        headers.append(header)
    return headers


def _list_context(params: ListParams) -> dict[str, Any]:
    paginator = Paginator(chain_list(search=params.q, ordering=params.sort), params.page_size)
    page = paginator.get_page(params.page)
    params = ListParams(q=params.q, sort=params.sort, page=page.number, page_size=params.page_size)
    query = params.as_query()
    return {
        "section": "fallback",
        "tab": "chains",
        "params": params,
        "query": query,
        # The state minus the page, for links that change sort or size.
        "query_no_page": {k: v for k, v in query.items() if k != "page"},
        "page_obj": page,
        "page_range": list(paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)),
        "rows": _chain_rows(list(page.object_list)),
        "headers": _headers(params),
        "page_sizes": PAGE_SIZES,
        "default_sort": DEFAULT_CHAIN_ORDERING,
        "list_url": reverse("chains:list"),
    }


@require_GET
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request", "HX-Target")
def chain_list_view(request: HtmxRequest) -> HttpResponse:
    context = _list_context(list_params(request.GET))
    template = "chains/list.html"
    if wants_partial(request) and request.htmx.target != "fallback-page":
        template += "#chain-table"
        context["oob"] = True
    else:
        # Only the page shows the notice (one query); the table alone does not.
        context["show_selection_notice"] = not notice_dismissed(user=request.user, notice=Notice.FALLBACK_SELECTION)
        if wants_partial(request):
            template += "#fallback-page"
    response = render(request, template, context)
    if wants_partial(request):
        # The canonical address of what is shown (no empty or default parameters).
        response["HX-Push-Url"] = context["list_url"] + query(context["query"])
    return response


def _table_response(request: HtmxRequest) -> HttpResponse:
    """Re-render the table for the list state the page is showing (its URL is in HX-Current-URL)."""
    params = list_params(current_url_query(request))
    context = _list_context(params)
    context["oob"] = True
    response = render(request, "chains/list.html#chain-table", context)
    # Keep the address bar in step if the page number had to change (last row of a page deleted).
    if context["params"] != params and current_url_path(request):
        response["HX-Replace-Url"] = context["list_url"] + query(context["query"])
    return response


@require_POST
@role_required(Role.ADMIN)
def selection_notice_dismiss_view(request: HtmxRequest) -> HttpResponse:
    """Dismiss the "how an entry is chosen" notice for this user, on every device. With htmx the empty answer
    lets the notice's own swap remove it; without JavaScript the form post comes back to the list."""
    notice_dismiss(user=request.user, notice=Notice.FALLBACK_SELECTION)
    if request.htmx:
        return HttpResponse("")
    return redirect("chains:list")


@require_POST
@role_required(Role.ADMIN)
def chain_toggle_view(request: HtmxRequest, chain_id: int) -> HttpResponse:
    chain = _get_chain(chain_id)
    enabled = request.POST.get("enabled") == "1"
    try:
        chain = chain_set_enabled(actor=request.user, chain_id=chain.pk, enabled=enabled)
    except ConflictError as exc:
        messages.error(request, exc.message)
        if request.htmx:
            return HttpResponse("")  # the row's chain is gone: the swap removes the row
        return redirect("chains:list")
    verb = "enabled" if chain.enabled else "disabled"
    messages.success(request, f"Chain “{chain.name}” {verb}.")
    if request.htmx:
        return render(request, "chains/list.html#chain-row", {"row": _chain_rows([chain])[0]})
    return redirect("chains:list")


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def chain_delete_view(request: HtmxRequest, chain_id: int) -> HttpResponse:
    """GET: the confirm page (used without JavaScript; with it, a <dialog> asks). POST: delete."""
    chain = _get_chain(chain_id)
    if request.method == "GET":
        return render(request, "chains/delete.html", {"section": "fallback", "chain": chain})
    try:
        chain_delete(actor=request.user, chain_id=chain.pk)
    except ConflictError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Chain “{chain.name}” deleted.")
    if request.htmx:
        return _table_response(request)
    return redirect("chains:list")


# ---------- Editor ----------


@dataclass(frozen=True)
class EntryView:
    index: int
    model: str
    provider: str
    errors: list[str]
    served_by: str  # the model's default provider, for the "default" option label
    capabilities: list[str]
    cost_hint: str
    cost_class: str


def _entry_views(entries: list[EntryRow], models: dict[str, LlmModel], source: LlmModel | None) -> list[EntryView]:
    views = []
    for i, entry in enumerate(entries):
        model = models.get(entry.model)
        hint, css = "", ""
        if model is not None and source is not None:
            hint = cost_hint(source=source, model=model)
            ratio = cost_ratio(source=source, model=model)
            css = "" if ratio is None else "cost-cheaper" if ratio < 1 else "cost-pricier" if ratio > 1 else ""
        views.append(
            EntryView(
                index=i,
                model=entry.model,
                provider=entry.provider,
                errors=entry.errors,
                served_by=model.provider.name if model is not None else "",
                capabilities=list(model.capabilities or []) if model is not None else [],
                cost_hint=hint,
                cost_class=css,
            )
        )
    return views


def _warnings(form: ChainForm, models: dict[str, LlmModel]) -> list[ChainWarning]:
    """Non-blocking warnings for what is on screen; nothing until the source and scope make sense."""
    source = models.get((form.value("source_model") or "").strip())
    if source is None:
        return []
    scope_type = form.value("scope_type") or ScopeType.GLOBAL
    scope_id = None if scope_type == ScopeType.GLOBAL else form.value("scope_id") or None
    scope: Scope | None
    try:
        scope = scope_validate(scope_type=scope_type, scope_id=scope_id)
    except ValidationFailed:
        scope = Scope.global_() if scope_type == ScopeType.GLOBAL else None
    if scope is None:
        return []
    shown = [e for e in form.entries if e.model in models]
    # An entry's provider override decides which protocol serves it (an unknown name: its own field error).
    # (A name with a control character names nothing, and PostgreSQL refuses NUL in a query.)
    named = {e.provider for e in shown if e.provider and not has_control_characters(e.provider)}
    overrides = {p.name: p for p in provider_list().filter(name__in=named)}
    return chain_warnings(
        source=source,
        entries=[models[e.model] for e in shown],
        scope=scope,
        providers=[overrides.get(e.provider) if e.provider else None for e in shown],
    )


def _preview_policy(fields: ResilienceFields, defaults: ResilienceDefaults) -> ResiliencePolicy:
    """The policy on screen: its valid knobs over the global defaults (invalid ones are ignored here;
    their errors show next to them once saved)."""
    clean, _ = resilience_validate(fields.policy())
    return resilience_effective(clean, defaults.policy or {})


def _timeline(policy: ResiliencePolicy, form: ChainForm, models: dict[str, LlmModel]) -> list[TimelineStep]:
    """The preview for the source and entries on screen (labels as the editor shows them)."""
    labels, prefill = [], set()
    for entry in form.entries:
        model = models.get(entry.model)
        if model is None:
            continue
        label = f"{model.name} via {entry.provider}" if entry.provider else model.name
        labels.append(label)
        if Capability.ASSISTANT_PREFILL in (model.capabilities or []):
            prefill.add(label)
    primary = (form.value("source_model") or "").strip() or "the source model"
    return resilience_timeline(policy, labels, primary, prefill=prefill)


def _resilience_context(form: ChainForm, models: dict[str, LlmModel]) -> dict[str, Any]:
    """The Resilience step: knobs with the global defaults as placeholders, and the timeline preview."""
    defaults = resilience_defaults_get()
    policy = _preview_policy(form.resilience, defaults)
    timeline = _timeline(policy, form, models)
    return {
        "resilience": form.resilience,
        "resilience_marker": RESILIENCE_MARKER,
        "resilience_on": policy.enabled,
        "knobs": knob_views(form.resilience, resilience_defaults_effective(defaults)),
        "timeline_steps": [s for s in timeline if s.kind != "note"],
        "timeline_notes": [s for s in timeline if s.kind == "note"],
    }


def _editor_context(request: HttpRequest, form: ChainForm, chain: FallbackChain | None) -> dict[str, Any]:
    catalog = list(llm_model_list())
    models = {m.name: m for m in catalog}
    source_name = (form.value("source_model") or "").strip()
    scope_type = form.value("scope_type") or ScopeType.GLOBAL
    groups = scope_choices()
    if scope_type != ScopeType.GLOBAL:
        # Only the chosen type's targets; with the global scope every group stays listed so
        # the form still works without JavaScript.
        groups = [(t, items) for t, items in groups if t == scope_type]
    return {
        "section": "fallback",
        "tab": "chains",
        "form": form,
        "chain": chain,
        "action": request.path,
        "catalog": catalog,
        "providers": list(provider_list().values_list("name", flat=True)),
        "source": models.get(source_name),
        "entries": _entry_views(form.entries, models, models.get(source_name)),
        "max_entries": MAX_ENTRIES,
        "warnings": _warnings(form, models),
        "scope_types": ScopeType.choices,
        "scope_groups": [(ScopeType(t).label, items) for t, items in groups],
        "scope_type": scope_type,
        "scope_id": str(form.value("scope_id") or ""),
        "capability_labels": dict(Capability.choices),
        "summary": form.error_summary() if form.is_bound else [],
        "has_entry_errors": any(e.errors for e in form.entries),
        **_resilience_context(form, models),
    }


def _initial_for(chain: FallbackChain) -> tuple[dict[str, Any], list[EntryRow]]:
    initial = {
        "name": chain.name,
        "source_model": chain.source_model.name,
        "scope_type": chain.scope_type,
        "scope_id": chain.scope_id or "",
        "enabled": chain.enabled,
        "version": chain.version,
    }
    entries = [
        EntryRow(model=e.model.name, provider=e.provider.name if e.provider is not None else "")
        for e in chain.entries.all()
    ]
    return initial, entries


def _stored_resilience(chain: FallbackChain | None) -> ResilienceFields:
    """The policy as the editor opens it: a new chain starts from the global default's `enabled`; an
    existing one shows the knobs it set (the others empty, i.e. the global defaults)."""
    inherited = bool(resilience_defaults_effective(resilience_defaults_get())["enabled"])
    stored = {} if chain is None else dict(chain.resilience or {})
    return resilience_from_stored(stored, inherited_enabled=inherited)


def _posted_resilience(request: HttpRequest, chain: FallbackChain | None) -> ResilienceFields:
    """The posted step; a post without it keeps the stored policy (ChainInput.resilience None)."""
    posted = resilience_from_post(request.POST)
    if posted is None:
        return _stored_resilience(chain)
    if chain is not None and "enabled" not in (chain.resilience or {}):
        # The chain inherits `enabled` from the global defaults: an untouched checkbox keeps it so.
        posted.inherits_enabled = bool(resilience_defaults_effective(resilience_defaults_get())["enabled"])
    return posted


# The <dialog> on the list that edits a chain in place; its GET asks for the editor partial (HX-Target).
CHAIN_MODAL = "chain-modal"


def _editor(request: HtmxRequest, chain: FallbackChain | None) -> HttpResponse:
    template = "chains/form.html"
    if request.method == "GET":
        if chain is None:
            initial, entries = {"scope_type": ScopeType.GLOBAL, "enabled": True}, [EntryRow()]
        else:
            initial, entries = _initial_for(chain)
        form = ChainForm(initial=initial, entries=entries, resilience=_stored_resilience(chain))
        if htmx_target(request) == CHAIN_MODAL:
            template = "chains/_modal.html"  # the list's editing-in-place dialog
        return render(request, template, _editor_context(request, form, chain))

    op = request.POST.get("op", "save")
    entries = entries_from_post(request.POST)
    resilience = _posted_resilience(request, chain)
    if op != "save":
        # Add/remove/move without JavaScript, or an HTMX refresh of hints, warnings and the timeline: no save.
        form = ChainForm(request.POST, entries=entries_apply_op(entries, op), resilience=resilience)
        form.is_valid()
        form.errors.clear()
        if wants_partial(request):
            template += "#chain-form"
        return render(request, template, _editor_context(request, form, chain))

    form = ChainForm(request.POST, entries=entries, resilience=resilience)
    if form.is_valid():
        data = form.chain_input()
        try:
            if chain is None:
                saved = chain_create(actor=request.user, data=data)
            else:
                saved = chain_update(
                    actor=request.user, chain_id=chain.pk, version=form.cleaned_data["version"], data=data
                )
        except ConflictError as exc:
            form.add_error(None, exc.message)
        except ValidationFailed as exc:
            form.add_service_errors(exc)
        else:
            verb = "created" if chain is None else "saved"
            messages.success(request, f"Chain “{saved.name}” {verb}.")
            if wants_partial(request):
                return _saved_in_modal(request)
            return redirect("chains:list")
    if wants_partial(request):
        template += "#chain-form"  # the modal's save: the errors stay in the modal
    return render(request, template, _editor_context(request, form, chain))


def _saved_in_modal(request: HtmxRequest) -> HttpResponse:
    """A save from the list's modal: the list's table for the state the list shows (app.js sends its URL as
    HX-Current-URL), swapped in place of the table; the chainModalSaved event closes the modal."""
    response = _table_response(request)
    response["HX-Retarget"] = "#chain-table"
    response["HX-Reswap"] = "outerHTML"
    response["HX-Trigger-After-Swap"] = "chainModalSaved"
    return response


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request", "HX-Target")
def chain_create_view(request: HtmxRequest) -> HttpResponse:
    return _editor(request, None)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request", "HX-Target")
def chain_edit_view(request: HtmxRequest, chain_id: int) -> HttpResponse:
    return _editor(request, _get_chain(chain_id))


# ---------- The global default resilience policy ----------


def _defaults_context(
    fields: ResilienceFields, version: int | None, row: ResilienceDefaults, errors: list[str]
) -> dict[str, Any]:
    return {
        "section": "fallback",
        "tab": "chains",
        "resilience": fields,
        "resilience_marker": RESILIENCE_MARKER,
        # An empty knob takes the built-in default.
        "knobs": knob_views(fields, RESILIENCE_DEFAULTS),
        "version": version,
        "row": row,
        "page_errors": errors,
        "summary": [("defaults-form", m) for m in errors] + fields.summary(),
    }


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def resilience_defaults_view(request: HttpRequest) -> HttpResponse:
    """The global default policy: what every chain's empty knob takes. Optimistic: a stale version is refused."""
    template = "chains/resilience_defaults.html"
    row = resilience_defaults_get()
    stored = resilience_from_stored(row.policy or {}, inherited_enabled=bool(RESILIENCE_DEFAULTS["enabled"]))
    if request.method == "GET":
        return render(request, template, _defaults_context(stored, row.version, row, []))

    posted = resilience_from_post(request.POST)
    fields = posted if posted is not None else stored  # no knobs posted: nothing to change
    if "enabled" not in (row.policy or {}):
        fields.inherits_enabled = bool(RESILIENCE_DEFAULTS["enabled"])
    version_form = ResilienceDefaultsForm(request.POST)
    version_form.is_valid()
    version: int | None = version_form.cleaned_data.get("version")
    saved, errors = _defaults_save(request, fields, version)
    if saved is None:
        return render(request, template, _defaults_context(fields, version, row, errors))
    if saved.version == version:
        messages.info(request, "Nothing changed in the default resilience policy.")
    else:
        messages.success(request, "Default resilience policy saved.")
    return redirect("chains:resilience")


def _defaults_save(
    request: HttpRequest, fields: ResilienceFields, version: int | None
) -> tuple[ResilienceDefaults | None, list[str]]:
    """Call the service; on failure, knob errors go onto `fields` and the others are returned."""
    errors: list[str] = []
    try:
        if version is None:
            raise ValidationFailed("The page sent no version; reload it and apply your change again.")
        return resilience_defaults_update(actor=request.user, version=version, policy=fields.policy()), []
    except ConflictError as exc:
        errors.append(exc.message)
    except ValidationFailed as exc:
        for key, problems in exc.errors.items():
            if key.startswith("policy."):
                fields.add_errors(key.removeprefix("policy."), problems)
            else:
                errors.extend(str(m) for m in problems)
        if not exc.errors:
            errors.append(exc.message)
    return None, errors
