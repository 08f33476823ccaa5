"""The resilience policy of a chain: its knobs, their built-in defaults and bounds, and pure validation.

A chain stores only what its admin set (`{"enabled": true, "max_retries": 2}`); every omitted knob takes
the global default policy (chains.models.ResilienceDefaults), whose omitted knobs take the built-in
defaults below. `resilience_effective` does that merge; the gateway's planner reads the result by these
knob names. Nothing here touches the database.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    kind: type  # int or float (enabled is the only boolean and is handled apart)
    default: int | float
    minimum: int | float
    maximum: int | float
    help: str


# Order = the order the API documents and the console will show.
KNOBS: tuple[Knob, ...] = (
    Knob("max_retries", int, 1, 0, 5, "Retries of the same target before moving to the next entry."),
    Knob("backoff_base_ms", int, 200, 0, 10_000, "Base of the exponential backoff with full jitter."),
    Knob("backoff_floor_ms", int, 50, 0, 10_000, "No two attempts on one target closer than this."),
    Knob("backoff_cap_ms", int, 2_000, 0, 60_000, "Largest backoff between two attempts on one target."),
    Knob("retry_after_cap_seconds", float, 5.0, 0, 60, "A longer Retry-After moves to the next entry instead."),
    Knob("max_attempts", int, 6, 1, 20, "Upstream calls per request, whatever the chain length and retries."),
    Knob("connect_timeout_seconds", float, 3.0, 0.1, 60, "Connect timeout of each attempt."),
    Knob("first_token_timeout_seconds", float, 15.0, 0.5, 600, "Time to first token (provider setting wins)."),
    Knob("idle_timeout_seconds", float, 15.0, 0.5, 600, "Stream idle: no event for this long (provider wins)."),
    Knob("deadline_seconds", float, 60.0, 1, 3_600, "The request's overall deadline; it always wins."),
)
KNOB_NAMES: tuple[str, ...] = ("enabled", *(k.name for k in KNOBS))
_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}

# The built-in default policy (what the global defaults start as).
RESILIENCE_DEFAULTS: dict[str, Any] = {"enabled": False, **{k.name: k.default for k in KNOBS}}


@dataclass(frozen=True, slots=True)
class ResiliencePolicy:
    """A chain's effective policy: every knob has a value (the gateway snapshot carries this)."""

    enabled: bool = False
    max_retries: int = 1
    backoff_base_ms: int = 200
    backoff_floor_ms: int = 50
    backoff_cap_ms: int = 2_000
    retry_after_cap_seconds: float = 5.0
    max_attempts: int = 6
    connect_timeout_seconds: float = 3.0
    first_token_timeout_seconds: float = 15.0
    idle_timeout_seconds: float = 15.0
    deadline_seconds: float = 60.0

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in KNOB_NAMES}

    @property
    def floor(self) -> float:
        """The backoff floor in seconds: no two attempts on one target closer than this."""
        return self.backoff_floor_ms / 1000


# The built-in default policy as the dataclass (off): what a chain without a policy gets.
DEFAULT_POLICY = ResiliencePolicy()


def _bounds(knob: Knob) -> str:
    return f"between {knob.minimum:g} and {knob.maximum:g}"


def resilience_validate(mapping: Any) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Check a policy object; returns (only the knobs given, cleaned, in KNOBS order; errors by knob name).

    Unknown knobs, wrong types and values out of range are errors (the message names the bounds). Integers
    are accepted for float knobs; floats with a fraction are refused for integer knobs; booleans are never
    numbers. Cross-knob rule: backoff_floor_ms <= backoff_cap_ms when both are given.
    """
    errors: dict[str, list[str]] = {}
    if not isinstance(mapping, Mapping):
        return {}, {"__all__": ["The resilience policy must be an object of knobs."]}
    for name in mapping:
        if name not in KNOB_NAMES:
            known = ", ".join(KNOB_NAMES)
            errors.setdefault(str(name), []).append(f"Unknown resilience knob “{name}”; known knobs: {known}.")
    clean: dict[str, Any] = {}
    if "enabled" in mapping:
        if isinstance(mapping["enabled"], bool):
            clean["enabled"] = mapping["enabled"]
        else:
            errors.setdefault("enabled", []).append("Must be true or false.")
    for knob in KNOBS:
        if knob.name not in mapping:
            continue
        value = mapping[knob.name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.setdefault(knob.name, []).append(f"Must be a number {_bounds(knob)}.")
            continue
        if knob.kind is int and isinstance(value, float) and not value.is_integer():
            errors.setdefault(knob.name, []).append(f"Must be a whole number {_bounds(knob)}.")
            continue
        # The bounds are checked before any conversion: float() of a very large int would overflow.
        if not knob.minimum <= value <= knob.maximum:
            errors.setdefault(knob.name, []).append(f"Must be {_bounds(knob)} (got {_shown(value)}).")
            continue
        clean[knob.name] = int(value) if knob.kind is int else float(value)
    floor, cap = clean.get("backoff_floor_ms"), clean.get("backoff_cap_ms")
    if floor is not None and cap is not None and floor > cap:
        errors.setdefault("backoff_floor_ms", []).append(
            f"The backoff floor ({floor} ms) cannot exceed the backoff cap ({cap} ms)."
        )
    ordered = {name: clean[name] for name in KNOB_NAMES if name in clean}
    return ordered, errors


def _shown(value: int | float) -> str:
    """A refused number for its message: as %g, or in words when it is too large for a float."""
    if isinstance(value, int) and not -(10**15) < value < 10**15:
        return "a number of more than 15 digits"
    return f"{value:g}"


def resilience_effective(chain: Mapping[str, Any], defaults: Mapping[str, Any]) -> ResiliencePolicy:
    """The chain's knobs over the global defaults over the built-in defaults.

    Both inputs are stored, already validated mappings; a knob name the code no longer knows is ignored, so
    an old row never breaks the gateway.
    """
    merged = {**RESILIENCE_DEFAULTS, **defaults, **chain}
    values = {name: merged[name] for name in KNOB_NAMES}
    floor, cap = values["backoff_floor_ms"], values["backoff_cap_ms"]
    if floor > cap:  # each side valid alone, from different levels: the cap wins
        values["backoff_floor_ms"] = cap
    return ResiliencePolicy(**values)


# ---------- The editor's preview: what the policy does, in plain words ----------


@dataclass(frozen=True, slots=True)
class TimelineStep:
    """One line of the preview: when it happens (plain words, relative), what happens, and its kind.

    kind: "call", "retry", "move", "give_up" (the story of one request whose every target answers 503),
    "bound" (the attempt cap and deadline) or "note" (what other failures do).
    """

    when: str
    text: str
    kind: str


NOT_RETRYABLE_TEXT = "400, 401, 403, 404, 422 or a content filter"


def _s(seconds: float) -> str:
    return f"{seconds:g} s"


def _retry_ceiling_seconds(policy: ResiliencePolicy, retry: int) -> float:
    """The longest wait before retry number `retry` (1 = the first): the planner draws uniformly up to
    min(cap, base * 2**(retry-1)) and never waits less than the floor."""
    ceiling: float = min(policy.backoff_cap_ms, policy.backoff_base_ms * 2.0 ** max(0, retry - 1))
    return max(policy.backoff_floor_ms, ceiling) / 1000


def _retry_word(retry: int, retries: int) -> str:
    return "once (" if retries == 1 else f"({retry} of {retries}; "


def _calls(n: int) -> str:
    return f"{n} call{'' if n == 1 else 's'}"


def _story_on(policy: ResiliencePolicy, entries: Sequence[str], primary: str) -> list[TimelineStep]:
    """Every target answers 503: retries on each, moves down the chain, stops at the cap or the end."""
    steps: list[TimelineStep] = []
    targets = [(primary, "primary"), *((name, f"entry {i}") for i, name in enumerate(entries, start=1))]
    calls = 0
    capped = False
    for index, (name, role) in enumerate(targets):
        if calls >= policy.max_attempts:
            capped = True
            break
        if index == 0:
            steps.append(TimelineStep("0 s", f"call {name} ({role}) → 503", "call"))
        else:
            steps.append(TimelineStep("then, at once", f"move to {name} ({role}) → 503", "move"))
        calls += 1
        for retry in range(1, policy.max_retries + 1):
            if calls >= policy.max_attempts:
                capped = True  # a retry was still due
                break
            wait = _s(_retry_ceiling_seconds(policy, retry))
            text = (
                f"retry {name} {_retry_word(retry, policy.max_retries)}backoff with jitter, at least "
                f"{policy.backoff_floor_ms:g} ms after the previous call) → 503 again"
            )
            steps.append(TimelineStep(f"≤ {wait} later", text, "retry"))
            calls += 1
        if capped:
            break
    if capped:
        end = f"stop: {_calls(policy.max_attempts)} made, the attempt cap; the client gets the last 503."
    elif not entries:
        end = "no entry to move to (the chain has none yet); the client gets the last 503."
    else:
        end = "no entry left; the client gets the last 503."
    steps.append(TimelineStep("then", end, "give_up"))
    steps.append(
        TimelineStep(
            "always",
            f"at most {_calls(policy.max_attempts)}; gives up at {_s(policy.deadline_seconds)} "
            "(no call starts after the request's deadline, whatever is left).",
            "bound",
        )
    )
    return steps


def _notes(policy: ResiliencePolicy, entries: Sequence[str], prefill: Collection[str]) -> list[TimelineStep]:
    """One line per other kind of failure."""
    notes = [
        TimelineStep(
            NOT_RETRYABLE_TEXT,
            "returned to the client unchanged after the one call: never retried, never moved on.",
            "note",
        )
    ]
    if not policy.enabled:
        notes.append(TimelineStep("A stream cut after the first token", "the stream ends with an error event.", "note"))
        return notes
    if policy.max_retries > 0:
        notes.append(
            TimelineStep(
                "429 with Retry-After",
                f"waits what the provider asks, up to {_s(policy.retry_after_cap_seconds)}, before the retry; "
                "a longer Retry-After moves to the next entry at once.",
                "note",
            )
        )
    notes.append(
        TimelineStep(
            "A timeout",
            f"each call has {_s(policy.connect_timeout_seconds)} to connect; a stream has "
            f"{_s(policy.first_token_timeout_seconds)} to its first token and may then be silent for "
            f"{_s(policy.idle_timeout_seconds)} (a provider's own first-token and idle timeouts win; a "
            "non-streamed answer has the provider's read timeout); "
            "a timed-out target is not called again, the next entry is called at once.",
            "note",
        )
    )
    continuation = next(((i, name) for i, name in enumerate(entries, start=1) if name in prefill), None)
    if continuation is not None:
        index, name = continuation
        cut = (
            f"continues on {name} (entry {index}), the next entry whose model supports assistant prefill, "
            "from the text already sent; if that fails too, on the next such entry."
        )
    else:
        cut = "ends with an error event: no entry's model supports assistant prefill, so none can continue it."
    notes.append(TimelineStep("A stream cut after the first token", cut, "note"))
    return notes


def resilience_timeline(
    policy: ResiliencePolicy,
    entries: Sequence[str],
    primary: str,
    *,
    prefill: Collection[str] = (),
) -> list[TimelineStep]:
    """What happens to one request when `primary` fails with a retryable error (503), in plain words.

    `entries` are the chain's entries in order (labels as the admin sees them), `prefill` the labels whose
    model supports assistant prefill. The story follows the planner's rules (gateway/resilience.py): the
    waits shown are the longest the backoff draws; the calls themselves take whatever the provider takes, so
    the deadline line is the only absolute time. Notes follow for the failures that are not retried.
    """
    if policy.enabled:
        story = _story_on(policy, entries, primary)
    else:
        story = [
            TimelineStep("0 s", f"call {primary} (primary) → 503", "call"),
            TimelineStep(
                "then",
                "the client gets the 503: nothing is retried and no entry is tried. The chain takes over "
                "once the circuit opens (new requests then start at entry 1).",
                "give_up",
            ),
        ]
    return [*story, *_notes(policy, entries, prefill)]
