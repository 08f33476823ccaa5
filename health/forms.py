"""Console input of the Provider Health tab. The forms only shape input; the services own every rule,
so the console shows the same messages as the API."""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django import forms
from django.http import QueryDict

from core.errors import ApplicationError
from health.selectors import CONFIG_FIELDS, BreakerConfigValues, BreakerOverrideValues
from health.services import COOLDOWN_MAX, COOLDOWN_MIN, COUNT_MAX, WINDOW_MAX, code_items, is_blank, whole_number

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


# What each knob trades off, in plain words, next to the field in the threshold editor.
FIELD_TRADEOFFS: dict[str, str] = {
    "failure_threshold": (
        "Lower opens sooner in a real outage, but a few slow or failed requests during a normal latency spike "
        "can open it too. Higher rides out blips, but the fallback starts later."
    ),
    "window_seconds": (
        "Longer remembers failures longer: steadier, but slower to forget a bad minute. Shorter reacts to "
        "what is happening now, but scattered errors never add up to the threshold."
    ),
    "minimum_requests": (
        "Guards quiet circuits: below it nothing opens, so a couple of errors out of a few requests do not "
        "trip the breaker. Too high and a low-traffic model never gets judged at all."
    ),
    "initial_cooldown_seconds": (
        "How long an open circuit sends traffic to the fallback before one probe tries the provider again. "
        "Shorter recovers sooner; longer spares a struggling provider."
    ),
    "cooldown_cap_seconds": (
        "Each failed probe doubles the cooldown up to this. A high cap backs off a long outage; a low cap keeps "
        "probing often, so recovery is noticed sooner."
    ),
    "failure_status_codes": (
        "Which answers count as failures. Add 429 to fail over while rate limited; drop a code a provider "
        "returns for bad requests, or one client's mistakes open the circuit for everyone."
    ),
}


@dataclass(frozen=True)
class TuningWarning:
    """Values the service accepts but that make the breaker trip on a handful of requests, or hardly ever."""

    key: str
    field: str  # the field the warning is about (its input is linked from the warning)
    message: str


# Below these, a burst of a few errors (a latency spike) can open the circuit.
FEW_REQUESTS = 5
LOW_THRESHOLD = 2
# Above both, a quiet circuit may never collect enough requests, and an outage takes long to count.
SLOW_WINDOW = 900
SLOW_MINIMUM = 100


def _parsed(values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The values as numbers when every one is what the service accepts; None otherwise (the service then
    reports the errors, and warnings wait until the values are valid)."""
    out: dict[str, Any] = {}
    for field in CONFIG_FIELDS[:-1]:
        number = whole_number(values.get(field))
        if number is None:
            return None
        out[field] = number
    items = code_items(values.get("failure_status_codes", ""))
    codes = [whole_number(item) for item in items or []]
    if items is None or any(c is None or not 100 <= c <= 599 for c in codes) or len(set(codes)) != len(codes):
        return None
    out["failure_status_codes"] = codes
    ok = (
        1 <= out["failure_threshold"] <= COUNT_MAX
        and 1 <= out["minimum_requests"] <= COUNT_MAX
        and 1 <= out["window_seconds"] <= WINDOW_MAX
        and COOLDOWN_MIN <= out["initial_cooldown_seconds"] <= out["cooldown_cap_seconds"] <= COOLDOWN_MAX
    )
    return out if ok else None


def tuning_warnings(values: Mapping[str, Any]) -> list[TuningWarning]:
    """What the console warns about before saving these thresholds (the API saves them without asking)."""
    v = _parsed(values)
    if v is None:
        return []
    threshold, minimum, window = v["failure_threshold"], v["minimum_requests"], v["window_seconds"]
    out: list[TuningWarning] = []
    if threshold <= LOW_THRESHOLD:
        what = "a single failed request opens" if threshold == 1 else "two failed requests open"
        out.append(
            TuningWarning(
                "low_threshold",
                "failure_threshold",
                f"Failure threshold {threshold}: {what} the circuit (within {window} s), so one bad moment "
                "sends traffic to the fallback.",
            )
        )
    if minimum < FEW_REQUESTS:
        out.append(
            TuningWarning(
                "few_requests",
                "minimum_requests",
                f"Minimum requests {minimum}: the circuit is judged on as few as {minimum} "
                f"request{'s' if minimum != 1 else ''}, so a normal latency spike can open it.",
            )
        )
    if threshold > minimum:
        out.append(
            TuningWarning(
                "threshold_above_minimum",
                "failure_threshold",
                f"Failure threshold {threshold} is above minimum requests {minimum}: the circuit stays closed "
                f"until {threshold} requests have failed within {window} s, even when every request fails; "
                "a quiet circuit may never open.",
            )
        )
    if window >= SLOW_WINDOW and minimum >= SLOW_MINIMUM:
        out.append(
            TuningWarning(
                "slow_to_open",
                "minimum_requests",
                f"Minimum requests {minimum} in a {window} s window: a circuit with less traffic than that "
                "never opens, and an outage takes long to count.",
            )
        )
    if not v["failure_status_codes"]:
        out.append(
            TuningWarning(
                "no_codes",
                "failure_status_codes",
                "No failure status codes: only timeouts and connection errors count, so a provider answering "
                "every request with 500 or 429 never opens its circuit.",
            )
        )
    return out


def warnings_signature(warnings: list[TuningWarning]) -> str:
    """What "Save anyway" confirms: these warnings about these values. Changing a value the warnings are
    about asks again."""
    text = "\n".join(w.message for w in warnings)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
    # The signature of the warnings the user chose to save anyway ("" when none were shown).
    confirm_risky = forms.CharField(required=False)

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
    confirm_risky = forms.CharField(required=False)

    @classmethod
    def for_override(cls, override: BreakerOverrideValues) -> "BreakerOverrideForm":
        initial: dict[str, Any] = {k: ("" if v is None else v) for k, v in override.as_dict().items()}
        initial["failure_status_codes"] = _codes_text(override.failure_status_codes)
        return cls(initial=initial)

    def target(self) -> tuple[str, str]:
        return self.cleaned_data.get("provider", ""), self.cleaned_data.get("model", "")

    def override_input(self) -> dict[str, Any]:
        return {name: self.cleaned_data.get(name, "") for name in CONFIG_FIELDS}

    def effective_input(self, base: BreakerConfigValues) -> dict[str, Any]:
        """The values the circuit would run with: the override's, and the global ones where it is empty."""
        inherited = base.as_dict()
        inherited["failure_status_codes"] = _codes_text(base.failure_status_codes)
        typed = self.override_input()
        return {name: inherited[name] if is_blank(typed[name]) else typed[name] for name in CONFIG_FIELDS}


def confirmed(form: forms.Form, warnings: list[TuningWarning]) -> bool:
    """True when there is nothing to confirm, or the user ticked "Save anyway" for exactly these warnings."""
    return not warnings or form.cleaned_data.get("confirm_risky") == warnings_signature(warnings)


# The sorts of the circuit table: the key in ?sort= and whether the first click sorts descending.
CIRCUIT_SORTS: dict[str, bool] = {"model": False, "failures": True, "requests": True}
DEFAULT_CIRCUIT_SORT = "model"


def circuit_sort(query: QueryDict) -> str:
    """The table's sort from a query string ("failures", "-requests", …); the default when missing or unknown."""
    value = str(query.get("sort") or "").strip()
    return value if value.lstrip("-") in CIRCUIT_SORTS else DEFAULT_CIRCUIT_SORT


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
