"""Console input of the Alerts page. The form only shapes input; alerts.services owns every rule, so the
console shows the API's messages."""

from typing import Any

from django import forms

from alerts.models import AlertRule, BodyFormat, RuleKind
from alerts.services import DEFAULTS, RuleInput
from core.errors import ApplicationError

# Field order of the editor (and of the error summary).
FIELDS = (
    "name",
    "kind",
    "provider",
    "model",
    "minutes",
    "threshold_percent",
    "min_requests",
    "min_count",
    "webhook_url",
    "body_format",
    "enabled",
)


class RuleForm(forms.Form):
    name = forms.CharField(required=False, strip=False, max_length=400)
    kind = forms.ChoiceField(choices=RuleKind.choices, initial=RuleKind.CIRCUIT_OPEN)
    provider = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=300)
    minutes = forms.IntegerField(required=False)
    threshold_percent = forms.FloatField(required=False)
    min_requests = forms.IntegerField(required=False)
    min_count = forms.IntegerField(required=False)
    webhook_url = forms.CharField(required=False, max_length=4000)
    body_format = forms.ChoiceField(choices=BodyFormat.choices, initial=BodyFormat.JSON)
    enabled = forms.BooleanField(required=False, initial=True)

    @classmethod
    def for_rule(cls, rule: AlertRule) -> "RuleForm":
        return cls(initial={name: getattr(rule, name) for name in FIELDS})

    @classmethod
    def blank(cls) -> "RuleForm":
        initial: dict[str, Any] = {"kind": RuleKind.CIRCUIT_OPEN, "body_format": BodyFormat.JSON, "enabled": True}
        initial.update(DEFAULTS[RuleKind.DEGRADED])
        initial.update(DEFAULTS[RuleKind.EXHAUSTED])
        initial["minutes"] = DEFAULTS[RuleKind.CIRCUIT_OPEN]["minutes"]
        return cls(initial=initial)

    def rule_input(self) -> RuleInput:
        data = self.cleaned_data
        return RuleInput(
            name=data.get("name") or "",
            kind=data.get("kind") or "",
            provider=data.get("provider") or "",
            model=data.get("model") or "",
            minutes=data.get("minutes"),
            threshold_percent=data.get("threshold_percent"),
            min_requests=data.get("min_requests"),
            min_count=data.get("min_count"),
            enabled=bool(data.get("enabled")),
            webhook_url=data.get("webhook_url") or "",
            body_format=data.get("body_format") or BodyFormat.JSON,
        )

    def add_service_errors(self, exc: ApplicationError) -> None:
        for key, messages in exc.errors.items():
            for message in messages:
                self.add_error(key if key in self.fields else None, message)
        if not exc.errors:
            self.add_error(None, exc.message)

    def error_summary(self) -> list[tuple[str, str]]:
        """(anchor id, message) for every error, in the order of the form."""
        out: list[tuple[str, str]] = [("rule-form", str(m)) for m in self.non_field_errors()]
        for name in FIELDS:
            out += [(f"id_{name}", str(m)) for m in self.errors.get(name, [])]
        return out
