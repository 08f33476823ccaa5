"""Console input of the Provider Health tab. The forms only shape input; the services own every rule,
so the console shows the same messages as the API."""

from typing import TYPE_CHECKING, Any

from django import forms

from core.errors import ApplicationError
from health.selectors import CONFIG_FIELDS, BreakerConfigValues, BreakerOverrideValues

# Labels and help of the threshold fields, in the order the editor shows them.
FIELD_LABELS: dict[str, str] = {
    "failure_threshold": "Failure threshold",
    "window_seconds": "Failure window (seconds)",
    "minimum_requests": "Minimum requests",
    "initial_cooldown_seconds": "Initial cooldown (seconds)",
    "cooldown_cap_seconds": "Cooldown cap (seconds)",
    "failure_status_codes": "Failure status codes",
}
FIELD_HELP: dict[str, str] = {
    "failure_threshold": "Failures in the window that open the circuit. At least 1.",
    "window_seconds": "Rolling window the failures are counted in. 1–3600.",
    "minimum_requests": "Requests in the window before failures are evaluated. At least 1.",
    "initial_cooldown_seconds": "Open → half-open after this long; doubles on each consecutive open. At least 30.",
    "cooldown_cap_seconds": "Longest cooldown. At least the initial cooldown, at most 86400 (24 h).",
    "failure_status_codes": "Comma-separated, each 100–599. Timeouts and connection errors always count.",
}


def _codes_text(codes: tuple[int, ...] | None) -> str:
    return "" if codes is None else ", ".join(str(c) for c in codes)


if TYPE_CHECKING:
    _Form = forms.Form  # what the mixin is mixed into
else:
    _Form = object


class _ServiceErrorsMixin(_Form):
    """Put a service's {field: [messages]} onto the form; unknown keys and "__all__" become form errors."""

    def add_service_errors(self, exc: ApplicationError) -> None:
        form: forms.Form = self
        for key, messages in exc.errors.items():
            field = key if key in form.fields else None
            for message in messages:
                form.add_error(field, message)
        if not exc.errors:
            form.add_error(None, exc.message)

    def error_summary(self) -> list[tuple[str, str]]:
        """(anchor id, message) for every error, in the order of the form."""
        form: forms.Form = self
        out: list[tuple[str, str]] = [(f"{form.prefix or 'config'}-form", str(m)) for m in form.non_field_errors()]
        for name, field in form.fields.items():
            if isinstance(field.widget, forms.HiddenInput):
                continue
            out += [(form[name].id_for_label, str(m)) for m in form.errors.get(name, [])]
        return out


class BreakerConfigForm(_ServiceErrorsMixin, forms.Form):
    """The global thresholds, as typed (strings); `breaker_config_update` parses and validates them."""

    failure_threshold = forms.CharField(required=False)
    window_seconds = forms.CharField(required=False)
    minimum_requests = forms.CharField(required=False)
    initial_cooldown_seconds = forms.CharField(required=False)
    cooldown_cap_seconds = forms.CharField(required=False)
    failure_status_codes = forms.CharField(required=False)

    @classmethod
    def for_values(cls, values: BreakerConfigValues) -> "BreakerConfigForm":
        initial: dict[str, Any] = values.as_dict()
        initial["failure_status_codes"] = _codes_text(values.failure_status_codes)
        return cls(initial=initial)

    def config_input(self) -> dict[str, Any]:
        return {name: self.cleaned_data.get(name, "") for name in CONFIG_FIELDS}


class BreakerOverrideForm(_ServiceErrorsMixin, forms.Form):
    """One (provider, model) override; an empty field inherits the global value."""

    prefix = "override"

    provider = forms.CharField(required=False)
    model = forms.CharField(required=False)
    failure_threshold = forms.CharField(required=False)
    window_seconds = forms.CharField(required=False)
    minimum_requests = forms.CharField(required=False)
    initial_cooldown_seconds = forms.CharField(required=False)
    cooldown_cap_seconds = forms.CharField(required=False)
    failure_status_codes = forms.CharField(required=False)

    @classmethod
    def for_override(cls, override: BreakerOverrideValues) -> "BreakerOverrideForm":
        initial: dict[str, Any] = {k: ("" if v is None else v) for k, v in override.as_dict().items()}
        initial["failure_status_codes"] = _codes_text(override.failure_status_codes)
        return cls(initial=initial)

    def target(self) -> tuple[str, str]:
        return self.cleaned_data.get("provider", ""), self.cleaned_data.get("model", "")

    def override_input(self) -> dict[str, Any]:
        return {name: self.cleaned_data.get(name, "") for name in CONFIG_FIELDS}


class CircuitForm(forms.Form):
    """Names one circuit (reset, delete override)."""

    provider = forms.CharField(required=False)
    model = forms.CharField(required=False)

    def target(self) -> tuple[str, str]:
        if not self.is_valid():
            return "", ""
        return self.cleaned_data["provider"], self.cleaned_data["model"]


# The expiry presets of the kill-switch dialogs: minutes, "" (until released) or "other" (the minutes field).
EXPIRY_PRESETS: tuple[tuple[str, str], ...] = (
    ("15", "15 min"),
    ("30", "30 min"),
    ("60", "1 hour"),
    ("", "Until released"),
    ("other", "Other"),
)
EXPIRY_DEFAULT = "60"


class HoldForm(_ServiceErrorsMixin, forms.Form):
    """Force open a circuit or drain a provider: target, reason, expiry. The service checks every value."""

    prefix = "hold"

    provider = forms.CharField(required=False)
    model = forms.CharField(required=False)
    reason = forms.CharField(required=False, strip=False)
    expiry = forms.CharField(required=False)
    minutes = forms.CharField(required=False)

    def target(self) -> tuple[str, str]:
        data = self.cleaned_data if self.is_bound and hasattr(self, "cleaned_data") else self.initial
        return str(data.get("provider") or ""), str(data.get("model") or "")

    def expiry_choice(self) -> str:
        value = self["expiry"].value()
        value = EXPIRY_DEFAULT if value is None else str(value)
        return value if value in {v for v, _ in EXPIRY_PRESETS} else EXPIRY_DEFAULT

    def minutes_input(self) -> str | None:
        """The minutes the operator chose: a preset, the typed number ("other"), or "" (until released).

        None, with an error on the form, when "Other" was chosen and no number typed (the service would
        read an empty value as "until released", which is not what was asked for).
        """
        choice = self.expiry_choice()
        if choice != "other":
            return choice
        typed = str(self.cleaned_data.get("minutes") or "").strip()
        if not typed:
            self.add_error("minutes", "Enter the number of minutes, or choose “Until released”.")
            return None
        return typed

    def reason_input(self) -> str:
        return str(self.cleaned_data.get("reason") or "")
