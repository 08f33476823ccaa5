"""Writes of authentication throttles: an attempt reserved, a failure confirmed, a lockout and an unlock, each
lockout and unlock audited."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from access.enums import Notice, ThrottleKind
from access.models import AuthThrottle, DismissedNotice
from access.selectors import Ident
from audit.services import audit_record
from core.types import Actor
from core.validators import has_control_characters


def _window() -> timedelta:
    return timedelta(seconds=settings.AUTH_FAILURE_WINDOW_SECONDS)


def _cooloff() -> timedelta:
    return timedelta(seconds=settings.AUTH_LOCKOUT_SECONDS)


def login_idents(*, username: str, address: str) -> list[Ident]:
    """What a sign-in attempt counts against: the username as typed and the client address.

    A username with a control or invisible formatting character (ESC, CR/LF, NUL, U+2028, bidi overrides…:
    `core.validators.has_control_characters`) names no account (Django's username validators refuse them),
    so such an attempt counts against the address only and the typed text is stored nowhere: not in a
    lockout row, not in the audit log.
    """
    idents = [(ThrottleKind.ADDRESS.value, address)]
    if username and not has_control_characters(username):
        idents.insert(0, (ThrottleKind.ACCOUNT.value, username[:150]))
    return idents


@dataclass
class Reservation:
    """An attempt allowed to check its password, counted in advance as a failure of each of `idents`."""

    scope: str
    address: str
    idents: list[Ident]
    stamp: float
    locked_until: datetime | None = None  # set when the attempt is refused unchecked
    rows: dict[Ident, int] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return self.locked_until is not None


def _locked_rows(*, scope: str, idents: list[Ident], now: datetime) -> list[AuthThrottle]:
    """The throttle rows of `idents`, created when missing, locked until the transaction ends.

    Always in the same order (sorted by kind, then value), so two attempts locking the same pair of rows cannot
    deadlock; every later lock of a reservation's rows (`_reservation_rows`) takes them in that order too.
    """
    rows = []
    for kind, value in sorted(set(idents)):
        throttle, _ = AuthThrottle.objects.select_for_update().get_or_create(
            scope=scope, kind=kind, value=value, defaults={"updated_at": now}
        )
        rows.append(throttle)
    return rows


@transaction.atomic
def auth_attempt_reserve(*, scope: str, idents: list[Ident], address: str) -> Reservation:
    """Decide, before any password or token is checked, whether this attempt may be checked at all.

    Under row locks (SELECT … FOR UPDATE on PostgreSQL; SQLite serialises writers): refused when any of
    `idents` is locked out or already holds AUTH_FAILURE_LIMIT failures within the window (counting attempts
    still being checked); otherwise a tentative failure is appended to each, so concurrent attempts see it.
    The caller then calls auth_attempt_succeeded or auth_attempt_failed. At most AUTH_FAILURE_LIMIT passwords
    are ever checked per account or address and window, however many attempts arrive at once.
    """
    now = timezone.now()
    oldest = (now - _window()).timestamp()
    reservation = Reservation(scope=scope, address=address, idents=idents, stamp=now.timestamp())
    rows = _locked_rows(scope=scope, idents=idents, now=now)
    for throttle in rows:
        recent = [t for t in throttle.failures if t > oldest]
        if len(recent) >= settings.AUTH_FAILURE_LIMIT and (
            throttle.locked_until is None or throttle.locked_until <= now
        ):
            if max(recent) <= now.timestamp() - UNSETTLED_SECONDS:
                _lock_out_unsettled(throttle, recent=recent, now=now, address=address)
                recent = []  # settled: locked out, or over
        if throttle.locked_until is not None and throttle.locked_until > now:
            # Attempts during a lockout are refused unchecked and do not extend it.
            reservation.locked_until = max(reservation.locked_until or throttle.locked_until, throttle.locked_until)
        elif len(recent) >= settings.AUTH_FAILURE_LIMIT:
            # The limit is reached by attempts still being checked: refused until they settle (at most the time
            # one password check takes; the last of them to fail locks the row).
            reservation.locked_until = max(reservation.locked_until or now, now + _cooloff())
    if reservation.refused:
        return reservation
    for throttle in rows:
        throttle.failures = [t for t in throttle.failures if t > oldest] + [reservation.stamp]
        throttle.locked_until = None
        throttle.updated_at = now
        throttle.save(update_fields=["failures", "locked_until", "updated_at"])
        reservation.rows[(throttle.kind, throttle.value)] = throttle.pk
    return reservation


# An attempt's failure is tentative from its reservation until its password check settles it, which takes well
# under a second. A row still at the limit this long after its newest failure holds failures that will never be
# settled (the worker died mid-check, or its settling transaction failed).
UNSETTLED_SECONDS = 60


def _lock_out_unsettled(throttle: AuthThrottle, *, recent: list[float], now: datetime, address: str) -> None:
    """Settle a row left at the limit by attempts that never settled, as if the newest had failed: a lockout from
    its time (audited, listed and unlockable like any other), or none when that would already be over. Until now
    such a row refused every attempt with no lockout anyone could see or end."""
    newest = datetime.fromtimestamp(max(recent), tz=now.tzinfo)
    throttle.failures = []
    throttle.updated_at = now
    until = newest + _cooloff()
    if until <= now:
        throttle.save(update_fields=["failures", "updated_at"])
        return
    throttle.locked_until = until
    throttle.save(update_fields=["failures", "locked_until", "updated_at"])
    _audit_lockout(throttle, failures=len(recent), address=address, unsettled=True)


def _audit_lockout(throttle: AuthThrottle, *, failures: int, address: str, unsettled: bool = False) -> None:
    assert throttle.locked_until is not None
    after = {
        "scope": throttle.scope,
        "kind": throttle.kind,
        "value": throttle.value,
        "failures": failures,
        "locked_until": throttle.locked_until.isoformat(),
        "client_address": address,
    }
    if unsettled:
        after["unsettled"] = True  # the failures' attempts never settled; found by a later attempt from `address`
    audit_record(
        actor=None,
        action="auth.lockout",
        object_type="auth_throttle",
        object_id=throttle.pk,
        object_repr=str(throttle),
        after=after,
    )


def auth_attempt_succeeded(*, reservation: Reservation) -> None:
    """The password (or token) was right: take back the tentative failures.

    The account's row also forgets its earlier failures (whoever signs in knows the password, so they were
    the owner's typos or a guesser's misses that no longer matter); the address's row keeps them, or one
    attacker with one account of their own could reset their address's count at will.
    """
    _take_back(reservation=reservation, forget_account=True)


def auth_attempt_abandoned(*, reservation: Reservation) -> None:
    """The check itself failed (an error, not an answer): take back the tentative failures only."""
    _take_back(reservation=reservation, forget_account=False)


def _reservation_rows(reservation: Reservation) -> QuerySet[AuthThrottle]:
    """The reservation's rows, locked in `_locked_rows`' order (by kind, then value; never by id: an address row
    older than the account row would be locked first, against the order of a concurrent reservation)."""
    return (
        AuthThrottle.objects.select_for_update()
        .filter(pk__in=sorted(reservation.rows.values()))
        .order_by("kind", "value")
    )


@transaction.atomic
def _take_back(*, reservation: Reservation, forget_account: bool) -> None:
    rows = _reservation_rows(reservation)
    now = timezone.now()
    for throttle in rows:
        if forget_account and throttle.kind == ThrottleKind.ACCOUNT:
            throttle.failures = []
        else:
            throttle.failures = _without_one(throttle.failures, reservation.stamp)
        throttle.updated_at = now
        throttle.save(update_fields=["failures", "updated_at"])


def _without_one(failures: list[float], stamp: float) -> list[float]:
    result = list(failures)
    if stamp in result:
        result.remove(stamp)
    return result


@transaction.atomic
def auth_attempt_failed(*, reservation: Reservation) -> datetime | None:
    """The password (or token) was wrong: the tentative failure stays. A row holding AUTH_FAILURE_LIMIT
    failures within AUTH_FAILURE_WINDOW_SECONDS is locked out for AUTH_LOCKOUT_SECONDS (audited as
    "auth.lockout"); the lockout consumes the failures, so counting starts afresh after it.

    Returns when the latest lockout among the reservation's rows ends, or None when none is locked.
    """
    now = timezone.now()
    oldest = (now - _window()).timestamp()
    locked: datetime | None = None
    rows = _reservation_rows(reservation)
    for throttle in rows:
        if throttle.locked_until is not None and throttle.locked_until > now:
            locked = max(locked or throttle.locked_until, throttle.locked_until)
            continue  # another attempt of this burst locked it already
        failures = [t for t in throttle.failures if t > oldest]
        if reservation.stamp not in failures:
            failures.append(reservation.stamp)  # unlocked (or pruned) meanwhile: this failure still counts
        throttle.updated_at = now
        if len(failures) < settings.AUTH_FAILURE_LIMIT:
            throttle.failures = failures
            throttle.save(update_fields=["failures", "updated_at"])
            continue
        throttle.failures = []
        throttle.locked_until = now + _cooloff()
        throttle.save(update_fields=["failures", "locked_until", "updated_at"])
        _audit_lockout(throttle, failures=len(failures), address=reservation.address)
        locked = max(locked or throttle.locked_until, throttle.locked_until)
    if settings.EMBEDDED:
        # No beat in embedded mode; one process on SQLite, so nothing to contend with once this commits.
        transaction.on_commit(auth_throttles_prune)
    return locked


@transaction.atomic
def auth_failure_record(*, scope: str, idents: list[Ident], address: str) -> datetime | None:
    """Count one failed attempt that was checked without a reservation (console API tokens: see
    docs/decisions.md); returns when the latest lockout among `idents` ends, or None."""
    reservation = auth_attempt_reserve(scope=scope, idents=idents, address=address)
    if reservation.refused:
        return reservation.locked_until
    return auth_attempt_failed(reservation=reservation)


def auth_throttles_prune() -> int:
    """Delete the rows whose failures and lockout have all expired; returns how many.

    Run by beat (access.prune), never inside an attempt's transaction: a DELETE there would wait on (and could
    deadlock with) the rows other attempts hold locked. Rows locked right now are skipped.
    """
    now = timezone.now()
    horizon = now - max(_window(), _cooloff())
    expired = AuthThrottle.objects.filter(updated_at__lt=horizon).filter(Q(locked_until=None) | Q(locked_until__lt=now))
    with transaction.atomic():
        ids = list(expired.select_for_update(skip_locked=True).values_list("pk", flat=True))
        deleted, _ = AuthThrottle.objects.filter(pk__in=ids).delete()
    return deleted


@transaction.atomic
def auth_unlock_many(*, actor: Actor, throttles: Iterable[AuthThrottle]) -> list[AuthThrottle]:
    """End these lockouts now and forget their failures (each audited as "auth.unlock"); returns the rows
    unlocked, by kind then value. A row not locked now is left alone.

    Unlocking an account also unlocks the client address the same attempt locked (same scope, same lockout
    end): typically the owner mistyped five times from their own machine, and an account unlocked from a still
    locked address could not sign in.

    Every row is locked before the first unlock is audited (the audit log's lock comes after every row's), in the
    order sign-in attempts lock theirs: by kind (accounts before addresses), then value. Unlocked one by one, the
    second row was locked after the first's audit event, and an attempt holding it (a lockout being recorded)
    waited on the audit log while the unlock waited on the row.
    """
    now = timezone.now()
    pks = {throttle.pk for throttle in throttles}
    rows = AuthThrottle.objects.select_for_update()
    order = ("kind", "value", "scope", "pk")  # an attempt's own rows (one scope) by kind, then value
    accounts = list(rows.filter(pk__in=pks, kind=ThrottleKind.ACCOUNT).order_by(*order))
    lockouts = [account for account in accounts if account.locked_until is not None and account.locked_until > now]
    same_attempt = Q(pk__in=pks)
    for account in lockouts:
        same_attempt |= Q(scope=account.scope, locked_until=account.locked_until)
    addresses = list(rows.filter(same_attempt, kind=ThrottleKind.ADDRESS).order_by(*order))
    unlocked = []
    for row in accounts + addresses:
        if row.locked_until is None or row.locked_until <= now:
            continue
        before = row.locked_until
        row.locked_until = None
        row.failures = []
        row.updated_at = now
        row.save(update_fields=["failures", "locked_until", "updated_at"])
        audit_record(
            actor=actor,
            action="auth.unlock",
            object_type="auth_throttle",
            object_id=row.pk,
            object_repr=str(row),
            before={"locked_until": before.isoformat()},
            after={"locked_until": None},
        )
        unlocked.append(row)
    return unlocked


def notice_dismiss(*, user: Actor, notice: str) -> None:
    """Remember that `user` dismissed `notice`, for every session and device. Idempotent (a second dismissal
    keeps the first time). Not audited: a UI preference changes nothing the gateway does."""
    if notice not in Notice.values:
        raise ValueError(f"Unknown notice {notice!r}.")
    if user is None or not user.is_authenticated:
        raise ValueError("Only a signed-in user can dismiss a notice.")
    DismissedNotice.objects.get_or_create(user_id=user.pk, notice=notice, defaults={"dismissed_at": timezone.now()})
