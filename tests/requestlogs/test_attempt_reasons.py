"""Why each attempt ended and what the request did next (issue 10): selectors, drawer, API and CSV.

The gateway records `next`, `class`, `retry_after`, `malformed_events`, `continuation` and `usage` on each
attempt when the chain's resilience policy is on. The reader treats them as untrusted: odd types are
unknown, unknown labels are shown as written but cut short, and nothing raises.
"""

import csv
import io
import re

from django.urls import reverse

from requestlogs.models import RequestLog
from requestlogs.selectors import TEXT_CAP, Attempt, PartUsage, log_attempts
from tests.factories.requestlogs import fallback, insert_logs, log_record

# A streamed request: a 429 retried, a connection error that moved on, a first-token timeout that moved
# on, a stream cut after its first token continued on claude, which finished the answer.
RESILIENT_ATTEMPTS = [
    {
        "provider": "openai",
        "model": "gpt-4o",
        "status": 429,
        "error": "upstream_status",
        "duration_ms": 310.0,
        "class": "rate_limit",
        "retry_after": 1.0,
        "next": "retry",
    },
    {
        "provider": "openai",
        "model": "gpt-4o",
        "status": None,
        "error": "connection_error",
        "duration_ms": 45.0,
        "class": "connection",
        "next": "move_on",
    },
    {
        "provider": "backup",
        "model": "mistral",
        "status": None,
        "error": "first_token_timeout",
        "duration_ms": 5000.0,
        "class": "timeout",
        "next": "move_on",
    },
    {
        "provider": "backup",
        "model": "llama",
        "status": 200,
        "error": "idle_timeout",
        "duration_ms": 2100.0,
        "class": "timeout",
        "next": "continue",
        "malformed_events": 2,
        "usage": {"prompt_tokens": 1200, "completion_tokens": 40},
    },
    {
        "provider": "backup",
        "model": "claude",
        "status": 200,
        "error": None,
        "duration_ms": 900.0,
        "continuation": True,
        "usage": {"prompt_tokens": 1240, "completion_tokens": 305},
    },
]

NOT_RECORDED = dict.fromkeys(("next", "class", "retry_after", "malformed_events", "continuation", "usage"))


def _resilient(catalog) -> RequestLog:
    return insert_logs(
        log_record(
            key=catalog.ursula_key,
            **fallback(step=2, served_model="claude"),
            stream=True,
            tokens_in=2440,
            tokens_out=345,
            attempts=RESILIENT_ATTEMPTS,
        )
    )[0]


def _unsaved(*attempts) -> RequestLog:
    """A row never stored: values JSON in the database could not hold (NaN, infinity) reach the reader too."""
    return RequestLog(attempts=list(attempts))


def _drawer(client, log: RequestLog) -> str:
    url = reverse("requestlogs:detail", args=[log.request_id])
    response = client.get(url, headers={"HX-Request": "true", "HX-Target": "log-drawer-body"})
    assert response.status_code == 200
    return response.content.decode()


def _text(html: str) -> str:
    html = re.sub(r'<span class="visually-hidden">.*?</span>', "", html)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _attempt_texts(html: str) -> list[str]:
    return [_text(li) for li in re.findall(r'<li class="attempt[^"]*">(.*?)</li>', html, re.S)]


# ---------- Selectors ----------


def test_recorded_reasons_are_read_with_their_types(log_catalog):
    log = _resilient(log_catalog)

    attempts = log_attempts(log)

    assert attempts[0] == Attempt(
        provider="openai",
        model="gpt-4o",
        status=429,
        error="upstream_status",
        duration_ms=310.0,
        next_step="retry",
        failure_class="rate_limit",
        retry_after=1.0,
    )
    assert [a.next_step for a in attempts] == ["retry", "move_on", "move_on", "continue", ""]
    assert [a.failure_class for a in attempts] == ["rate_limit", "connection", "timeout", "timeout", ""]
    assert attempts[3].malformed_events == 2 and attempts[3].usage == PartUsage(1200, 40)
    assert [a.continuation for a in attempts] == [False, False, False, False, True]
    assert attempts[4].usage == PartUsage(1240, 305)


def test_attempts_logged_without_a_policy_have_no_reasons(log_catalog):
    log = insert_logs(log_record(key=log_catalog.alice_key))[0]

    (attempt,) = log_attempts(log)

    assert (attempt.next_step, attempt.failure_class, attempt.retry_after) == ("", "", None)
    assert (attempt.malformed_events, attempt.continuation, attempt.usage) == (None, False, None)


def test_hostile_values_read_as_unknown_and_never_raise():
    long_label = "give_up:" + "x" * 500
    log = _unsaved(
        {"next": 5, "class": ["rate_limit"], "retry_after": "1", "malformed_events": 2.0, "continuation": "true"},
        {"next": long_label, "class": "  brand_new_class  ", "retry_after": True, "malformed_events": True},
        {"retry_after": -3, "malformed_events": -1, "continuation": 1, "usage": ["prompt_tokens", 3]},
        {"retry_after": float("nan"), "usage": {"prompt_tokens": "12", "completion_tokens": 3}},
        {"retry_after": float("inf"), "usage": {"prompt_tokens": True, "completion_tokens": -4}},
        {"retry_after": 2, "usage": {}},
    )

    attempts = log_attempts(log)

    assert [a.next_step for a in attempts][:2] == ["", long_label[: TEXT_CAP - 1] + "…"]
    assert len(attempts[1].next_step) == TEXT_CAP
    assert [a.failure_class for a in attempts][:2] == ["", "brand_new_class"]
    assert [a.retry_after for a in attempts] == [None, None, None, None, None, 2.0]
    assert [a.malformed_events for a in attempts][:3] == [None, None, None]
    assert not any(a.continuation for a in attempts)
    assert [a.usage for a in attempts] == [None, None, None, PartUsage(None, 3), None, None]


# ---------- Drawer ----------


def test_drawer_says_why_each_attempt_ended_and_what_followed(log_catalog, admin_client):
    html = _drawer(admin_client, _resilient(log_catalog))

    assert _attempt_texts(html) == [
        "1 gpt-4o via openai 429 · rate limit · Retry-After 1 s → retried 310 ms failed",
        "2 gpt-4o via openai connection error → moved on to the next entry 45 ms failed",
        "3 mistral via backup first-token timeout → moved on to the next entry 5.00 s failed",
        "4 llama via backup 200 · stream cut after the first token · idle timeout (the stream stalled) "
        "→ continued on claude 2 malformed events dropped this part: 1,200 in / 40 out tokens 2.10 s failed",
        "5 claude via backup continuation 200 this part: 1,240 in / 305 out tokens 900 ms served",
    ]
    assert html.count('class="tag attempt-continuation"') == 1
    note = "Continued stream: the answer was completed by another entry; tokens are the sum of the parts."
    assert html.count(note) == 1


def test_drawer_of_a_give_up_says_the_error_went_to_the_client(log_catalog, admin_client):
    log = insert_logs(
        log_record(
            key=log_catalog.alice_key,
            status=400,
            attempts=[
                {
                    "provider": "openai",
                    "model": "gpt-4o",
                    "status": 400,
                    "error": "upstream_status",
                    "duration_ms": 50.0,
                    "class": "content_filter",
                    "next": "give_up:not_retryable",
                    "malformed_events": 1,
                }
            ],
        )
    )[0]

    html = _drawer(admin_client, log)

    assert _attempt_texts(html) == [
        "1 gpt-4o via openai 400 · content filter → returned to the client (not retryable) "
        "1 malformed event dropped 50 ms returned to client"
    ]
    assert "Continued stream" not in html


def test_drawer_shows_unknown_labels_as_written_and_escaped(log_catalog, admin_client):
    log = insert_logs(
        log_record(
            key=log_catalog.alice_key,
            status=502,
            attempts=[
                {
                    "provider": "openai",
                    "model": "gpt-4o",
                    "status": None,
                    "error": "<b>new_kind</b>",
                    "duration_ms": 5.0,
                    "class": "<img src=x onerror=alert(1)>",
                    "next": "give_up:<script>alert(1)</script>",
                }
            ],
        )
    )[0]

    html = _drawer(admin_client, log)

    assert "<script>alert(1)</script>" not in html and "<img src=x" not in html and "<b>new_kind" not in html
    assert "returned to the client (&lt;script&gt;alert(1)&lt;/script&gt;)" in html
    assert "&lt;b&gt;new_kind&lt;/b&gt; · &lt;img src=x onerror=alert(1)&gt;" in html
    assert _attempt_texts(html) == [
        "1 gpt-4o via openai &lt;b&gt;new_kind&lt;/b&gt; · &lt;img src=x onerror=alert(1)&gt; "
        "→ returned to the client (&lt;script&gt;alert(1)&lt;/script&gt;) 5.0 ms returned to client"
    ]


# ---------- API ----------


def test_api_shows_the_reasons_and_null_where_none_was_recorded(log_catalog, admin_client):
    log = _resilient(log_catalog)
    plain = insert_logs(log_record(key=log_catalog.alice_key))[0]

    body = admin_client.get(reverse("api-request-log-detail", args=[log.request_id])).json()
    plain_body = admin_client.get(reverse("api-request-log-detail", args=[plain.request_id])).json()

    first, cut, last = body["attempts"][0], body["attempts"][3], body["attempts"][4]
    assert first == {
        "provider": "openai",
        "model": "gpt-4o",
        "status": 429,
        "error": "upstream_status",
        "duration_ms": 310.0,
        "next": "retry",
        "class": "rate_limit",
        "retry_after": 1.0,
        "malformed_events": None,
        "continuation": None,
        "usage": None,
    }
    assert (cut["next"], cut["malformed_events"], cut["usage"]) == (
        "continue",
        2,
        {"prompt_tokens": 1200, "completion_tokens": 40},
    )
    assert (last["next"], last["class"], last["continuation"]) == (None, None, True)
    assert plain_body["attempts"] == [
        {"provider": "openai", "model": "gpt-4o", "status": 200, "error": None, "duration_ms": 118.0, **NOT_RECORDED}
    ]


def test_schema_documents_the_new_attempt_fields(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()

    attempt_ref = schema["components"]["schemas"]["RequestLog"]["properties"]["attempts"]["items"]["$ref"]
    attempt = schema["components"]["schemas"][attempt_ref.rsplit("/", 1)[1]]["properties"]
    assert {"provider", "model", "status", "error", "duration_ms", *NOT_RECORDED} <= set(attempt)
    assert "failure_class" not in attempt
    for name in NOT_RECORDED:
        assert attempt[name].get("description") or attempt[name].get("allOf"), name
    assert "give_up:<reason>" in attempt["next"]["description"]


# ---------- CSV ----------


def test_csv_attempts_cell_names_the_next_step(log_catalog, admin_client):
    _resilient(log_catalog)

    response = admin_client.get(reverse("requestlogs:export"), {"fallback": "yes"})

    (line,) = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert line["attempts"] == (
        "openai/gpt-4o 429 rate_limit 310ms retry; "
        "openai/gpt-4o connection_error connection 45ms move_on; "
        "backup/mistral first_token_timeout timeout 5000ms move_on; "
        "backup/llama 200 timeout 2100ms continue; "
        "backup/claude 200 900ms"
    )
