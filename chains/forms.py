"""Console input for the Fallback Chains tab: list state from the URL, and the chain editor."""

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.http import QueryDict

from catalog.enums import ScopeType
from chains.models import MAX_ENTRIES
from chains.resilience import KNOB_NAMES, KNOBS, Knob
from chains.selectors import CHAIN_ORDERINGS, DEFAULT_CHAIN_ORDERING
from chains.services import ChainInput, EntryInput
from core.errors import ApplicationError

PAGE_SIZES = (10, 25, 50, 100)
DEFAULT_PAGE_SIZE = 25


@dataclass(frozen=True)
class ListParams:
    """Search, sort, page and page size of a list, as they appear in the URL."""

    q: str = ""
    sort: str = DEFAULT_CHAIN_ORDERING
    page: int = 1
    page_size: int = DEFAULT_PAGE_SIZE

    def as_query(self) -> dict[str, Any]:
        """Only what differs from the defaults, so URLs stay short."""
        out: dict[str, Any] = {}
        if self.q:
            out["q"] = self.q
        if self.sort != DEFAULT_CHAIN_ORDERING:
            out["sort"] = self.sort
        if self.page_size != DEFAULT_PAGE_SIZE:
            out["page_size"] = self.page_size
        if self.page != 1:
            out["page"] = self.page
        return out


class ChainListForm(forms.Form):
    """Lenient: a malformed value falls back to its default instead of an error page."""

    q = forms.CharField(required=False, max_length=200, strip=True)
    sort = forms.CharField(required=False)
    page = forms.IntegerField(required=False, min_value=1)
    page_size = forms.TypedChoiceField(
        required=False,
        choices=[(n, n) for n in PAGE_SIZES],
        coerce=int,
        empty_value=DEFAULT_PAGE_SIZE,  # type: ignore[arg-type]  # stubs: str | None; Django takes any value
    )

    def params(self) -> ListParams:
        self.is_valid()
        data = self.cleaned_data
        sort = data.get("sort") or DEFAULT_CHAIN_ORDERING
        if sort.lstrip("-") not in CHAIN_ORDERINGS:
            sort = DEFAULT_CHAIN_ORDERING
        return ListParams(
            q=data.get("q") or "",
            sort=sort,
            page=data.get("page") or 1,
            page_size=data.get("page_size") or DEFAULT_PAGE_SIZE,
        )


def list_params(query: QueryDict) -> ListParams:
    return ChainListForm(query).params()


# ---------- The resilience policy (the chain editor's step and the global defaults page) ----------

# Posted with the knobs: a post without it (an older page, a script) leaves the stored policy alone.
RESILIENCE_MARKER = "resilience-present"
RESILIENCE_PREFIX = "resilience-"


@dataclass(frozen=True)
class KnobText:
    """How the console names a knob: the label, the unit after the input and plain-language help."""

    label: str
    unit: str
    help: str


KNOB_TEXT: dict[str, KnobText] = {
    "max_retries": KnobText(
        "Retries per target", "retries", "How often the same model is tried again before the next entry is."
    ),
    "backoff_base_ms": KnobText(
        "Backoff base", "ms", "The first retry waits a random time up to this; each further retry doubles it."
    ),
    "backoff_floor_ms": KnobText(
        "Backoff floor", "ms", "The shortest wait: two calls to one model never start closer than this."
    ),
    "backoff_cap_ms": KnobText("Backoff cap", "ms", "The longest wait between two calls to one model."),
    "retry_after_cap_seconds": KnobText(
        "Longest Retry-After to wait",
        "s",
        "A provider asking to wait longer than this is skipped: the next entry is called at once.",
    ),
    "max_attempts": KnobText(
        "Most calls per request", "calls", "Every retry and every move counts, whatever the chain's length."
    ),
    "connect_timeout_seconds": KnobText(
        "Connect timeout", "s", "A call that cannot connect within this moves to the next entry."
    ),
    "first_token_timeout_seconds": KnobText(
        "First-token timeout", "s", "Time allowed until the first token; a provider's own setting wins."
    ),
    "idle_timeout_seconds": KnobText(
        "Stream idle timeout", "s", "A stream silent this long counts as broken; a provider's own setting wins."
    ),
    "deadline_seconds": KnobText(
        "Request deadline", "s", "No call starts after this, counted from the request's arrival; it always wins."
    ),
}


def knob_display(value: Any) -> str:
    """A stored knob as the input shows it: 5.0 → "5", 0.5 → "0.5"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return str(value) if isinstance(value, int) else f"{value:g}"


def _knob_value(text: str) -> int | float | str:
    """The typed text as a number; anything else stays text so resilience_validate words the error."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


@dataclass
class ResilienceFields:
    """The policy as typed: the checkbox and each knob's text ("" = take the default of the level above).

    `send` is False when the post carried no resilience fields: the stored policy is then left alone.
    `inherits_enabled` is the `enabled` the policy gets from the level above when it does not set it
    itself (None: it does set it, or it is new); an unchanged checkbox then stays inherited, not pinned.
    """

    enabled: bool = False
    text: dict[str, str] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    send: bool = True
    inherits_enabled: bool | None = None

    def policy(self) -> dict[str, Any]:
        """Only what the admin set: `enabled` (unless still inherited) and the filled-in knobs."""
        out: dict[str, Any] = {}
        if self.inherits_enabled is None or self.enabled != self.inherits_enabled:
            out["enabled"] = self.enabled
        for knob in KNOBS:
            text = self.text.get(knob.name, "")
            if text:
                out[knob.name] = _knob_value(text)
        return out

    @property
    def policy_errors(self) -> list[str]:
        """Errors about the policy as a whole (templates cannot read "__all__")."""
        return self.errors.get("__all__", [])

    def add_errors(self, key: str, messages: list[str]) -> None:
        """A service error under a knob's name, or under "__all__" for the policy as a whole."""
        name = key if key in KNOB_NAMES else "__all__"
        self.errors.setdefault(name, []).extend(str(m) for m in messages)

    def summary(self) -> list[tuple[str, str]]:
        """(anchor id, message) in the order of the page."""
        out = [("resilience", m) for m in self.errors.get("__all__", [])]
        out += [("id_resilience-enabled", m) for m in self.errors.get("enabled", [])]
        for knob in KNOBS:
            out += [(f"id_{RESILIENCE_PREFIX}{knob.name}", m) for m in self.errors.get(knob.name, [])]
        return out


def resilience_from_post(data: QueryDict) -> ResilienceFields | None:
    """The posted step, or None when the post has no resilience fields at all."""
    if RESILIENCE_MARKER not in data:
        return None
    return ResilienceFields(
        enabled=data.get(f"{RESILIENCE_PREFIX}enabled", "") in ("on", "1", "true"),
        text={k.name: data.get(f"{RESILIENCE_PREFIX}{k.name}", "").strip()[:40] for k in KNOBS},
    )


def resilience_from_stored(stored: Mapping[str, Any], *, inherited_enabled: bool) -> ResilienceFields:
    """What a stored policy shows: its knobs prefilled, the others empty (= the level above)."""
    return ResilienceFields(
        enabled=bool(stored.get("enabled", inherited_enabled)),
        text={k.name: knob_display(stored[k.name]) for k in KNOBS if k.name in stored},
        send=False,
    )


class ResilienceDefaultsForm(forms.Form):
    """The defaults page's optimistic version; the knobs are read by resilience_from_post."""

    version = forms.IntegerField(required=False)


@dataclass(frozen=True)
class KnobView:
    """One knob input as the template renders it."""

    knob: Knob
    text: KnobText
    value: str
    placeholder: str
    errors: list[str]

    @property
    def name(self) -> str:
        return f"{RESILIENCE_PREFIX}{self.knob.name}"

    @property
    def input_id(self) -> str:
        return f"id_{self.name}"

    @property
    def step(self) -> str:
        return "1" if self.knob.kind is int else "any"

    @property
    def minimum(self) -> str:
        return knob_display(self.knob.minimum)

    @property
    def maximum(self) -> str:
        return knob_display(self.knob.maximum)


def knob_views(fields: ResilienceFields, placeholders: Mapping[str, Any]) -> list[KnobView]:
    """Every knob in KNOBS order; `placeholders` are the values an empty input takes."""
    return [
        KnobView(
            knob=knob,
            text=KNOB_TEXT[knob.name],
            value=fields.text.get(knob.name, ""),
            placeholder=knob_display(placeholders[knob.name]),
            errors=fields.errors.get(knob.name, []),
        )
        for knob in KNOBS
    ]


# ---------- The chain editor ----------

_ENTRY_FIELD = re.compile(r"^entries-(\d+)-model$")


@dataclass
class EntryRow:
    """One entry as typed in the editor (names, not resolved objects)."""

    model: str = ""
    provider: str = ""
    errors: list[str] = field(default_factory=list)


def entries_from_post(data: QueryDict) -> list[EntryRow]:
    """Entries in the order their fields were posted, which is the order shown on screen.

    Fields are indexed (entries-0-model, entries-0-provider, ...), so the form works without
    JavaScript; the index only pairs a model with its provider, the order comes from the form.
    """
    rows: list[EntryRow] = []
    for key in data:
        match = _ENTRY_FIELD.match(key)
        if match:
            index = match.group(1)
            rows.append(
                EntryRow(model=data.get(key, "").strip(), provider=data.get(f"entries-{index}-provider", "").strip())
            )
    return rows[: MAX_ENTRIES + 5]


def entries_apply_op(rows: list[EntryRow], op: str) -> list[EntryRow]:
    """Editing without JavaScript: the add, remove and up/down buttons post the form with an `op`."""
    rows = list(rows)
    verb, _, arg = op.partition(":")
    if verb == "add":
        if len(rows) < MAX_ENTRIES:
            rows.append(EntryRow())
        return rows
    try:
        i = int(arg)
    except ValueError:
        return rows
    if not 0 <= i < len(rows):
        return rows
    if verb == "remove":
        del rows[i]
    elif verb == "up" and i > 0:
        rows[i - 1], rows[i] = rows[i], rows[i - 1]
    elif verb == "down" and i < len(rows) - 1:
        rows[i + 1], rows[i] = rows[i], rows[i + 1]
    return rows


class ChainForm(forms.Form):
    """The scalar fields of a chain. The service owns the rules, so messages match the API's."""

    name = forms.CharField(required=False, strip=False)
    source_model = forms.CharField(required=False)
    scope_type = forms.CharField(required=False)
    scope_id = forms.CharField(required=False)
    enabled = forms.BooleanField(required=False)
    version = forms.IntegerField(required=False)

    def __init__(
        self, *args: Any, entries: list[EntryRow], resilience: ResilienceFields | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.entries = entries
        self.entry_list_errors: list[str] = []
        self.resilience = resilience if resilience is not None else ResilienceFields(send=False)

    def value(self, name: str) -> Any:
        """The value to show in the widget: posted data when bound, else the initial value."""
        return self[name].value()

    def chain_input(self) -> ChainInput:
        data = self.cleaned_data
        scope_type = data.get("scope_type") or ScopeType.GLOBAL
        scope_id = data.get("scope_id") or None
        if scope_type == ScopeType.GLOBAL:
            # A target left selected from another scope type means nothing for a global scope.
            scope_id = None
        return ChainInput(
            name=data.get("name") or "",
            source_model=data.get("source_model") or "",
            entries=[EntryInput(model=e.model, provider=e.provider or None) for e in self.entries],
            scope_type=scope_type,
            scope_id=scope_id,  # scope_validate reports non-integers
            enabled=bool(data.get("enabled")),
            resilience=self.resilience.policy() if self.resilience.send else None,
        )

    def add_service_errors(self, exc: ApplicationError) -> None:
        """Map the service's field keys (name, entries.0.model, scope, version ...) onto the form."""
        for key, messages in exc.errors.items():
            parts = key.split(".")
            if parts[0] == "entries" and len(parts) >= 2 and parts[1].isdigit():
                index = int(parts[1])
                if index < len(self.entries):
                    self.entries[index].errors.extend(messages)
                else:
                    self.entry_list_errors.extend(messages)
            elif key == "entries":
                self.entry_list_errors.extend(messages)
            elif parts[0] == "resilience":
                self.resilience.add_errors(".".join(parts[1:]), messages)
            elif key == "scope":
                for message in messages:
                    self.add_error("scope_id", message)
            elif key in ("name", "source_model", "version"):
                for message in messages:
                    self.add_error(key, message)
            else:
                for message in messages:
                    self.add_error(None, message)
        if not exc.errors:
            self.add_error(None, exc.message)

    def error_summary(self) -> list[tuple[str, str]]:
        """(anchor id, message) for every error, in the order of the page."""
        out: list[tuple[str, str]] = [("chain-form", str(m)) for m in self.non_field_errors()]
        for name in ("name", "source_model"):
            out += [(f"id_{name}", str(m)) for m in self.errors.get(name, [])]
        out += [("entry-list", m) for m in self.entry_list_errors]
        for i, entry in enumerate(self.entries):
            out += [(f"id_entries-{i}-model", m) for m in entry.errors]
        out += self.resilience.summary()
        out += [("id_scope_type", str(m)) for m in self.errors.get("scope_id", [])]
        out += [("chain-form", str(m)) for m in self.errors.get("version", [])]
        return out
