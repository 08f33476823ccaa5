"""failure_reason: the words next to an open circuit's state."""

import pytest

from health.breaker import Outcome
from health.reasons import failure_reason


@pytest.mark.parametrize(
    ("last_status", "expected"),
    [
        (429, "rate limited · 429"),
        ("429", "rate limited · 429"),
        (503, "server errors · 503"),
        ("500", "server errors · 500"),
        (599, "server errors · 599"),
        ("timeout", "timing out"),
        ("connection_error", "connection refused"),
        (404, "failing · 404"),
        (408, "failing · 408"),
        ("cancelled", "failing · cancelled"),
        (None, ""),
        ("", ""),
    ],
)
def test_failure_reason(last_status, expected):
    assert failure_reason(last_status) == expected


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (Outcome.of_status(429), "rate limited · 429"),
        (Outcome.of_status(502), "server errors · 502"),
        (Outcome.timeout(), "timing out"),
        (Outcome.connection_error(), "connection refused"),
    ],
)
def test_failure_reason_of_the_breakers_own_labels(outcome, expected):
    assert failure_reason(outcome.label) == expected
