"""The webhook sender: claims a due delivery, POSTs it, records the attempt, retries with backoff; repeats.

`deliveries_send(now=...)` is what the `alerts.deliver` task runs (swept every 5 s, so new deliveries go out
within seconds and retries happen; embedded mode runs it from the periodic thread). A delivery is claimed
right before it is sent, one at a time, so its lease covers only its own POST: a slow receiver never makes
the lease of a later delivery run out while this sender still means to send it. The claim is a conditional
UPDATE that only one sender can win (PostgreSQL first picks candidates with `SELECT ... FOR UPDATE SKIP
LOCKED`, so concurrent senders take different rows instead of queueing), the POST happens outside any
transaction, and the result is written only by the claim's holder. A sender that dies mid-send leaves its
claim to expire (the lease), after which the delivery is tried again: the one case where a receiver can see
a notification twice.

One run sends at most `limit` deliveries and starts no new one after `budget_seconds` (the embedded thread
runs 1 s jobs too); the rest waits for the next sweep. A delivery whose host resolves to a link-local or
metadata address is not sent: it fails at once (alerts.webhooks).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q

from alerts.models import Delivery, DeliveryAttempt, DeliveryStatus
from alerts.webhooks import TargetRefused, target_check, webhook_url_redacted

log = logging.getLogger(__name__)

# One run's cap: this many deliveries, and no new POST once this long has passed (the rest: the next sweep).
MAX_PER_RUN = 10
RUN_BUDGET_SECONDS = 5.0
# Due rows one claim tries, in order, until it wins one (SQLite: a racing sender may take the first).
CANDIDATES = 5
USER_AGENT = "ControlPlane-Alerts/1"


@dataclass
class SendResult:
    """Delivery ids by what this run did with them."""

    delivered: list[int] = field(default_factory=list)
    retrying: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


def backoff(attempts: int) -> timedelta:
    """The wait after the n-th failed attempt: base * 2^(n-1), capped."""
    base = settings.ALERT_WEBHOOK_BACKOFF_SECONDS
    cap = max(settings.ALERT_WEBHOOK_BACKOFF_CAP_SECONDS, base)
    return timedelta(seconds=min(base * (1 << min(max(attempts, 1) - 1, 20)), cap))


def _lease() -> timedelta:
    return timedelta(seconds=settings.ALERT_WEBHOOK_TIMEOUT_SECONDS * 3 + 10)


def _due(now: datetime) -> Q:
    # One subject's notifications reach the rule's receiver in the order they were made: a "resolved" waits
    # while the alert's "opened" is still pending (in its backoff), or the receiver's last word would be
    # "firing"; and a new alert's "firing" waits for the previous alert's "resolved" of the same rule and
    # subject, or the last word would be "resolved" while it fires. (A deleted rule's alerts: each on its own.)
    pending_before = Delivery.objects.filter(status=DeliveryStatus.PENDING, id__lt=OuterRef("id"))
    same_alert = pending_before.filter(alert=OuterRef("alert"))
    same_subject = pending_before.filter(alert__rule=OuterRef("alert__rule"), alert__subject=OuterRef("alert__subject"))
    return (
        Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
        & (Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        & ~Exists(same_alert)
        & ~Exists(same_subject)
    )


def _claim(now: datetime) -> tuple[Delivery, str] | None:
    """Take one due delivery for this sender (None when none is left); each row is won by exactly one sender."""
    with transaction.atomic():
        candidates = Delivery.objects.filter(_due(now)).order_by("next_attempt_at", "id")
        take = CANDIDATES
        if connection.vendor == "postgresql":
            # One row: a sender locks only the row it takes, so a concurrent one skips nothing else.
            # `of`: the delivery's row only, not the alert row the ordering condition joins.
            candidates, take = candidates.select_for_update(skip_locked=True, of=("self",)), 1
        for delivery_id in list(candidates.values_list("id", flat=True)[:take]):
            token = uuid.uuid4().hex
            # Conditional: a sender that read the same candidate (SQLite, or a lease that just expired) loses.
            won = Delivery.objects.filter(_due(now), pk=delivery_id).update(
                claimed_until=now + _lease(), claim_token=token
            )
            if won == 1:
                break
        else:
            return None
    delivery = Delivery.objects.filter(pk=delivery_id, claim_token=token).first()
    return None if delivery is None else (delivery, token)


def idempotency_key(delivery: Delivery) -> str:
    """The same on every attempt of one delivery, different for every other: a receiver that sees a key twice (a
    retry whose first answer was lost, a sender that died between its POST and its write) can drop the repeat.
    The creation time keeps keys apart across databases whose ids start again (a reinstalled console)."""
    return f"cp-delivery-{delivery.pk}-{int(delivery.created_at.timestamp() * 1000)}"


def _post(delivery: Delivery) -> tuple[int | None, str, bool]:
    """POST one delivery: (status code or None, error, whether retrying is pointless).

    The whole POST, name lookup, connection and answer's head included, has ALERT_WEBHOOK_TIMEOUT_SECONDS:
    httpx's timeouts bound each read alone, so a receiver sending its head a byte at a time (or a resolver
    that stalls) would otherwise hold the sender past its claim's lease (and another sender would send the
    delivery again) and stall the run.
    """
    # Not asyncio.run(): when it ends it waits for the loop's executor threads, where a name lookup abandoned at
    # the deadline may still wait on a stalled resolver. Closing the loop leaves them to end on their own, and a
    # new loop per POST gives each its own threads, so one stalled name never delays another receiver's POST.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_post_within(delivery, settings.ALERT_WEBHOOK_TIMEOUT_SECONDS))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _post_within(delivery: Delivery, seconds: float) -> tuple[int | None, str, bool]:
    """The name lookup, its check and the POST, under one deadline."""
    try:
        async with httpx.AsyncClient(timeout=seconds, follow_redirects=False) as client, asyncio.timeout(seconds):
            await target_check(delivery.url)
            # Streamed and never read: the answer's status is all that counts, whatever size its body.
            headers = {"User-Agent": USER_AGENT, "Idempotency-Key": idempotency_key(delivery)}
            request = client.stream("POST", delivery.url, json=delivery.payload, headers=headers)
            async with request as response:
                code = response.status_code
    except TargetRefused as exc:
        return None, str(exc), True
    except TimeoutError:
        return None, f"No answer within {seconds:g} s.", False
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500], False
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        # An address httpx cannot send to (a host that is no valid domain name): it never will be.
        return None, f"Not a URL the sender can use: {type(exc).__name__}: {exc}"[:500], True
    except OSError as exc:  # the name did not resolve (httpx wraps its own socket errors): tried again later
        return None, f"Name lookup failed: {type(exc).__name__}: {exc}"[:500], False
    except Exception as exc:
        # Nothing may leave the send while its claim is held: the run would stop, and the row, claimed again
        # each time its lease ran out, would stop every later run too. Recorded and retried like any failure.
        log.exception("alerts: delivery %s to %s failed", delivery.pk, webhook_url_redacted(delivery.url))
        return None, f"{type(exc).__name__}: {exc}"[:500], False
    return code, "" if 200 <= code < 300 else f"HTTP {code}", False


def _record(
    delivery: Delivery,
    token: str,
    now: datetime,
    code: int | None,
    error: str,
    duration_ms: float,
    *,
    give_up: bool = False,
) -> str:
    """Store the attempt and the delivery's new state; the status it reached ("" if the claim was lost)."""
    attempts = delivery.attempts + 1
    ok = code is not None and 200 <= code < 300
    if ok:
        changes: dict[str, object] = {"status": DeliveryStatus.DELIVERED, "delivered_at": now, "last_error": ""}
    elif give_up or attempts >= settings.ALERT_WEBHOOK_MAX_ATTEMPTS:
        changes = {"status": DeliveryStatus.FAILED, "last_error": error}
    else:
        changes = {"next_attempt_at": now + backoff(attempts), "last_error": error}
    with transaction.atomic():
        won = Delivery.objects.filter(pk=delivery.pk, claim_token=token).update(
            attempts=attempts, claimed_until=None, claim_token="", **changes
        )
        if won != 1:
            return ""
        DeliveryAttempt.objects.create(
            delivery=delivery, number=attempts, at=now, status_code=code, error=error, duration_ms=duration_ms
        )
    return str(changes.get("status", DeliveryStatus.PENDING))


def deliveries_send(
    *,
    now: datetime | Callable[[], datetime] | None = None,
    limit: int = MAX_PER_RUN,
    budget_seconds: float = RUN_BUDGET_SECONDS,
) -> SendResult:
    """Send due deliveries one at a time (at most `limit`, none started after `budget_seconds`); record each.

    `now` is the time the claims and attempts are made at: a fixed time or a clock read at each of them
    (tests; backoff is counted from it), by default the wall clock.
    """
    from django.utils import timezone

    clock: Callable[[], datetime]
    if now is None:
        clock = timezone.now
    elif isinstance(now, datetime):
        fixed = now
        clock = lambda: fixed  # noqa: E731 - a constant clock
    else:
        clock = now
    result = SendResult()
    started = time.monotonic()
    for _ in range(limit):
        claimed = _claim(clock())
        if claimed is None:
            break
        delivery, token = claimed
        begin = time.monotonic()
        code, error, hopeless = _post(delivery)
        duration_ms = round((time.monotonic() - begin) * 1000, 1)
        status = _record(delivery, token, clock(), code, error, duration_ms, give_up=hopeless)
        if status == DeliveryStatus.DELIVERED:
            result.delivered.append(delivery.pk)
        elif status == DeliveryStatus.FAILED:
            result.failed.append(delivery.pk)
            log.warning(
                "alerts: delivery %s to %s given up after %s attempt(s): %s",
                delivery.pk,
                webhook_url_redacted(delivery.url),
                delivery.attempts + 1,
                error,
            )
        elif status:
            result.retrying.append(delivery.pk)
        if time.monotonic() - started >= budget_seconds:
            break
    return result
