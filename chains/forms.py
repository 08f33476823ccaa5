"""Console input for the Fallback Chains tab: list state from the URL, and the chain editor."""

import re
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.http import QueryDict

from catalog.enums import ScopeType
from chains.models import MAX_ENTRIES
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

    def __init__(self, *args: Any, entries: list[EntryRow], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries = entries
        self.entry_list_errors: list[str] = []

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
        out += [("id_scope_type", str(m)) for m in self.errors.get("scope_id", [])]
        out += [("chain-form", str(m)) for m in self.errors.get("version", [])]
        return out
