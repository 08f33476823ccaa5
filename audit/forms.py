"""Console input for the Audit Log page: filters and paging from the URL."""

from dataclasses import dataclass
from typing import Any

from django import forms

PAGE_SIZES = (10, 25, 50, 100)
DEFAULT_PAGE_SIZE = 25


@dataclass(frozen=True)
class AuditParams:
    actor: str = ""
    action: str = ""
    object_type: str = ""
    object_id: str = ""
    page: int = 1
    page_size: int = DEFAULT_PAGE_SIZE

    @property
    def filtered(self) -> bool:
        return bool(self.actor or self.action or self.object_type or self.object_id)

    def as_query(self) -> dict[str, Any]:
        """Only what differs from the defaults, so URLs stay short."""
        out: dict[str, Any] = {
            k: v
            for k, v in (
                ("actor", self.actor),
                ("action", self.action),
                ("object_type", self.object_type),
                ("object_id", self.object_id),
            )
            if v
        }
        if self.page_size != DEFAULT_PAGE_SIZE:
            out["page_size"] = self.page_size
        if self.page != 1:
            out["page"] = self.page
        return out


class AuditFilterForm(forms.Form):
    """Lenient: a malformed value falls back to its default instead of an error page."""

    actor = forms.CharField(required=False, max_length=150)
    action = forms.CharField(required=False, max_length=64)
    object_type = forms.CharField(required=False, max_length=64)
    object_id = forms.CharField(required=False, max_length=200)
    page = forms.IntegerField(required=False, min_value=1)
    page_size = forms.TypedChoiceField(
        required=False,
        choices=[(n, n) for n in PAGE_SIZES],
        coerce=int,
        empty_value=DEFAULT_PAGE_SIZE,  # type: ignore[arg-type]  # stubs: str | None; Django takes any value
    )

    def params(self) -> AuditParams:
        self.is_valid()
        data = self.cleaned_data
        return AuditParams(
            actor=data.get("actor") or "",
            action=data.get("action") or "",
            object_type=data.get("object_type") or "",
            object_id=data.get("object_id") or "",
            page=data.get("page") or 1,
            page_size=data.get("page_size") or DEFAULT_PAGE_SIZE,
        )
