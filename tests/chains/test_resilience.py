"""The pure core of the resilience policy: knobs, validation, the merge over the defaults."""

import dataclasses

import pytest

from chains.resilience import (
    DEFAULT_POLICY,
    KNOB_NAMES,
    KNOBS,
    RESILIENCE_DEFAULTS,
    ResiliencePolicy,
    resilience_effective,
    resilience_validate,
)


def test_knob_names_are_the_ones_the_planner_reads():
    assert KNOB_NAMES == (
        "enabled",
        "max_retries",
        "backoff_base_ms",
        "backoff_floor_ms",
        "backoff_cap_ms",
        "retry_after_cap_seconds",
        "max_attempts",
        "connect_timeout_seconds",
        "first_token_timeout_seconds",
        "idle_timeout_seconds",
        "deadline_seconds",
    )


def test_the_dataclass_defaults_are_the_built_in_defaults_and_the_issue_s():
    assert DEFAULT_POLICY.as_dict() == RESILIENCE_DEFAULTS
    assert [f.name for f in dataclasses.fields(ResiliencePolicy)] == list(KNOB_NAMES)
    assert (
        RESILIENCE_DEFAULTS["enabled"],
        RESILIENCE_DEFAULTS["max_retries"],
        RESILIENCE_DEFAULTS["retry_after_cap_seconds"],
        RESILIENCE_DEFAULTS["max_attempts"],
        RESILIENCE_DEFAULTS["connect_timeout_seconds"],
        RESILIENCE_DEFAULTS["first_token_timeout_seconds"],
        RESILIENCE_DEFAULTS["idle_timeout_seconds"],
    ) == (False, 1, 5.0, 6, 3.0, 15.0, 15.0)
    for knob in KNOBS:
        assert knob.minimum <= knob.default <= knob.maximum, knob.name


def test_validate_keeps_only_the_knobs_given_in_knob_order_with_their_types():
    clean, errors = resilience_validate({"max_attempts": 4.0, "enabled": True, "deadline_seconds": 30})

    assert errors == {}
    assert list(clean.items()) == [("enabled", True), ("max_attempts", 4), ("deadline_seconds", 30.0)]
    assert isinstance(clean["max_attempts"], int) and isinstance(clean["deadline_seconds"], float)


def test_validate_of_an_empty_object_is_empty():
    assert resilience_validate({}) == ({}, {})


def test_validate_names_an_unknown_knob():
    clean, errors = resilience_validate({"enabled": True, "retries": 3})

    assert clean == {"enabled": True}
    assert list(errors) == ["retries"]
    assert errors["retries"][0].startswith("Unknown resilience knob “retries”; known knobs: enabled, max_retries,")


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("max_retries", 6, "Must be between 0 and 5 (got 6)."),
        ("max_retries", -1, "Must be between 0 and 5 (got -1)."),
        ("max_attempts", 0, "Must be between 1 and 20 (got 0)."),
        ("connect_timeout_seconds", 0.05, "Must be between 0.1 and 60 (got 0.05)."),
        ("deadline_seconds", 3601, "Must be between 1 and 3600 (got 3601)."),
        ("max_retries", 1.5, "Must be a whole number between 0 and 5."),
        ("max_retries", True, "Must be a number between 0 and 5."),
        ("backoff_cap_ms", "100", "Must be a number between 0 and 60000."),
        ("idle_timeout_seconds", None, "Must be a number between 0.5 and 600."),
        ("enabled", "yes", "Must be true or false."),
        ("enabled", 1, "Must be true or false."),
    ],
)
def test_validate_refuses_wrong_types_and_values_out_of_range_with_the_bounds(knob, value, message):
    clean, errors = resilience_validate({knob: value})

    assert (clean, errors) == ({}, {knob: [message]})


def test_validate_accepts_the_bounds_themselves():
    given = {k.name: k.maximum for k in KNOBS} | {"backoff_floor_ms": 0}
    clean, errors = resilience_validate(given)

    assert errors == {}
    assert clean["max_retries"] == 5 and clean["backoff_floor_ms"] == 0


def test_validate_refuses_a_floor_above_the_cap():
    _clean, errors = resilience_validate({"backoff_floor_ms": 500, "backoff_cap_ms": 100})

    assert errors == {"backoff_floor_ms": ["The backoff floor (500 ms) cannot exceed the backoff cap (100 ms)."]}


def test_validate_refuses_something_that_is_not_an_object():
    assert resilience_validate(["enabled"]) == ({}, {"__all__": ["The resilience policy must be an object of knobs."]})


def test_effective_takes_the_chain_over_the_defaults_over_the_built_ins():
    policy = resilience_effective({"enabled": True, "max_retries": 2}, {"max_retries": 0, "deadline_seconds": 20.0})

    assert policy == dataclasses.replace(DEFAULT_POLICY, enabled=True, max_retries=2, deadline_seconds=20.0)


def test_effective_of_nothing_is_the_default_policy_off():
    assert resilience_effective({}, {}) == DEFAULT_POLICY
    assert DEFAULT_POLICY.enabled is False


def test_effective_ignores_knobs_the_code_no_longer_knows_and_caps_the_floor():
    policy = resilience_effective({"old_knob": 1, "backoff_floor_ms": 900}, {"backoff_cap_ms": 300})

    assert (policy.backoff_floor_ms, policy.backoff_cap_ms) == (300, 300)
