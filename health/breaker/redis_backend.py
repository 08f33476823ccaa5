"""Redis breaker (production): Lua makes window, state and probe atomic across processes.

The request path never waits on Redis for a closed circuit:
- `allow()` reads a per-process mirror of circuit states (a dict swapped or updated by one writer lock,
  read without locking). The mirror follows every transition through pub/sub (the scripts PUBLISH
  inside the same atomic step), plus each script's reply, plus a full resync on (re)connect and every
  `resync_interval` seconds. Only a circuit whose mirror says open-and-cooled-down or half-open-with-
  a-free-slot asks Redis, because taking the probe slot must be atomic across processes.
- `record()` puts the outcome on an in-process queue; a worker thread, woken by the first outcome, gathers
  for `gather_interval` (5 ms), then sends whatever has queued as one pipeline, with one `record` script
  call per circuit and generation (the outcomes as ordered runs; a probe's outcome has a call of its
  own), so Redis work grows with circuits, not with requests, and the thread wakes once per interval.
  While no queued outcome is a failure or a probe's answer (nothing a circuit trips or closes on), the
  batch waits up to `calm_interval` (100 ms) first; such an outcome cuts that wait short. A healthy
  process then takes the GIL for Redis ten times a second instead of up to two hundred.
- If Redis fails or hangs (socket timeouts of 50 ms, no retries), the engine switches to a local
  MemoryEngine seeded from the mirror, logs once, and the subscriber thread keeps trying to reconnect;
  when Redis answers again it resynchronises the mirror and Redis is the truth again. The outcome of a probe
  Redis granted this process that could not reach Redis is kept and sent then (the slot there is held until
  it arrives); a probe the local engine granted never reaches Redis (it never held Redis's slot).
- A probe round trip the caller gave up on must not leave a slot held by nobody: the script gets the
  caller's deadline (Redis TIME, with a wide margin for the error of the clock offset) and grants nothing
  once it has passed, and the engine releases the ticket of every such call when Redis answers again.
  A grant refused as late says the offset is off: the engine re-measures it in the background and holds
  that circuit locally for `late_hold` seconds, so its callers do not each make a round trip meanwhile.
- Transitions: the one process whose script made a transition (its `record` reply says 'transition', its
  `allow` granted a probe) appends the event to `events`; the worker thread ships buffered events to the
  history stream with XADD, in an outcome batch's pipeline or on its own within `ship_interval`.
- Operator holds (`ConfigSet.controls`) are decided locally from the configuration every process follows:
  a held circuit is refused without a round trip and never probed.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError
from redis.retry import Retry

from health.breaker.base import DEFAULT_PROBE_TIMEOUT_SECONDS, BreakerEngine, BreakerUnavailable, ConfigUnreadable
from health.breaker.events import HISTORY_FIELD, HISTORY_MAXLEN, EventBuffer, history_stream
from health.breaker.lua import SCRIPTS
from health.breaker.memory import MemoryEngine
from health.breaker.types import (
    BreakerEvent,
    BreakerSettings,
    CircuitSnapshot,
    Clock,
    ConfigSet,
    Control,
    Decision,
    EventKind,
    Outcome,
    ResetResult,
    State,
    SystemClock,
    Verdict,
    classify,
    label_to_status,
    to_datetime,
)

log = logging.getLogger(__name__)

_FIELDS = 8  # circuit fields in every script reply (see lua.reply)
_RECORD_HEAD = 4  # a `record` reply's leading values: status, script time, window failures, window total
_STOP = object()
_MAX_PENDING = 100_000
_BATCH = 4096  # outcomes per pipeline; they coalesce into one script call per circuit and generation
_MAX_ABANDONED = 10_000
_OFFSET_SAMPLES = 5  # TIME round trips per offset measurement; the one with the shortest round trip is kept


class _Flush:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


def _int(value: str) -> int | None:
    return int(value) if value != "" else None


class _Fields:
    """One circuit as a script replied it (times in Redis milliseconds)."""

    __slots__ = ("consec", "cooldown_until", "gen", "lf_at", "lf_label", "opened_at", "probe_at", "state")

    def __init__(self, raw: list[str]) -> None:
        self.state = State(raw[0])
        self.gen = int(raw[1])
        self.opened_at = _int(raw[2])
        self.cooldown_until = _int(raw[3])
        self.consec = int(raw[4] or 0)
        self.lf_at = _int(raw[5])
        self.lf_label = raw[6]
        self.probe_at = _int(raw[7])


class _Mirror:
    """What this process knows of one circuit, plus its cached decisions (no allocation on the hot path)."""

    __slots__ = (
        "consec",
        "cooldown_until",
        "decision",
        "gen",
        "held",
        "hold_until",
        "opened_at",
        "probe_at",
        "refuse_until",
        "refused",
        "seq",
        "state",
    )

    def __init__(self, provider: str, model: str, f: _Fields | None, seq: int = 0, *, probe_timeout_ms: int) -> None:
        self.seq = seq  # value of the engine's update counter when this entry was written
        self.state = f.state if f else State.CLOSED
        self.gen = f.gen if f else 0
        self.cooldown_until = f.cooldown_until if f else None
        self.probe_at = f.probe_at if f else None
        self.opened_at = f.opened_at if f else None
        self.consec = f.consec if f else 0
        self.hold_until = 0  # estimated Redis ms: refuse locally until then (a grant was refused as late)
        # Estimated Redis ms before which this process refuses without asking Redis: the latest of the open
        # circuit's cooldown end, the in-flight probe's expiry (half-open) and the late-grant hold. One
        # comparison on the hot path instead of three.
        refuse_until = 0
        if self.state is State.OPEN and self.cooldown_until is not None:
            refuse_until = self.cooldown_until
        elif self.state is State.HALF_OPEN and self.probe_at is not None:
            refuse_until = self.probe_at + probe_timeout_ms
        self.refuse_until = refuse_until
        self.decision = Decision(provider, model, True, State.CLOSED, False, self.gen)
        self.refused = Decision(provider, model, False, self.state, False, self.gen)
        self.held = Decision(provider, model, False, State.OPEN, False, self.gen)  # under an operator's hold

    def hold(self, until: int) -> None:
        """Refuse locally until `until` (estimated Redis ms) whatever the state says (a late grant)."""
        self.hold_until = until
        self.refuse_until = max(self.refuse_until, until)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def circuit_tag(provider: str, model: str) -> str:
    """The hash tag body of one circuit: `provider/model`, with "%" and "/" percent-encoded in the provider.

    The first "/" is then always the separator, so ("a/b", "c") and ("a", "b/c") get different keys.
    Names without "%" or "/" keep the plain `provider/model` tag (and the keys they always had).
    """
    return f"{provider.replace('%', '%25').replace('/', '%2F')}/{model}"


class RedisEngine(BreakerEngine):
    """Shared circuits in Redis. `clock` given = test mode: scripts use the clock's time instead of Redis TIME."""

    def __init__(
        self,
        *,
        url: str,
        namespace: str = "cp:breaker",
        clock: Clock | None = None,
        config: ConfigSet | None = None,
        probe_timeout_seconds: float = DEFAULT_PROBE_TIMEOUT_SECONDS,
        socket_timeout: float = 0.05,
        deadline_margin: float = 0.5,
        late_hold: float = 1.0,
        background_timeout: float = 1.0,
        resync_interval: float = 30.0,
        reconnect_interval: float = 1.0,
        max_reconnect_interval: float = 5.0,
        config_channel: str | None = None,
        config_loader: Callable[[int], ConfigSet | None] | None = None,
        config_lock: threading.Lock | None = None,
        events: EventBuffer | None = None,
        ship_interval: float = 0.5,
        gather_interval: float = 0.005,
        calm_interval: float = 0.1,
    ) -> None:
        self.events = events if events is not None else EventBuffer()
        self._history = history_stream(namespace)
        self._ship_interval = ship_interval
        # After the first outcome of a batch, the worker waits this long for more before sending, so a
        # busy process wakes it (and takes the GIL for it) once per interval, not once per request.
        # flush() and close() cut the wait short.
        self._gather_interval = gather_interval
        self._hurry = threading.Event()
        # Before that, a batch of calm outcomes (successes and cancellations of ordinary calls) waits up to
        # calm_interval: they move no circuit, so they may reach Redis later. An outcome that may trip or close
        # a circuit (a failure, a probe's answer) sets _urgent, and its batch leaves after gather_interval as
        # before. Each batch takes the GIL from the event loop several times (one per system call of its
        # round trip), which at 5 ms intervals cost a light-load request about a fifth of its CPU.
        self._calm_interval = calm_interval
        self._urgent = threading.Event()
        self._ship_error_logged = False
        self._time_override = clock is not None
        self._clock: Clock = clock or SystemClock()
        self._config = config or ConfigSet()
        if not probe_timeout_seconds > 0:
            raise ValueError(f"probe_timeout_seconds must be positive, got {probe_timeout_seconds!r}")
        self._probe_timeout_ms = _ms(probe_timeout_seconds)
        self._probe_timeout_seconds = probe_timeout_seconds
        self._ns = namespace
        self._registry = f"{namespace}:circuits"
        self._channel = f"{namespace}:events"
        self._config_channel = config_channel
        # The loader reads the thresholds and holds for a published version: None = nothing to apply (that
        # version is in force already); an exception = not readable now (retried until it reads). A read and
        # its configure() happen under config_lock, which the process's in-process listener shares, so a read
        # made before a local commit cannot be applied after that commit's own reload.
        self._config_loader = config_loader
        self._config_lock = config_lock or threading.Lock()
        self._config_stale = False  # a published change could not be read: try again
        self._resync_interval = resync_interval
        self._reconnect_interval = reconnect_interval
        # Only the subscriber leaves degraded mode, on its next attempt: Redis back after a long outage is
        # noticed within this long (its waits double from reconnect_interval up to here).
        self._max_reconnect_interval = max(max_reconnect_interval, reconnect_interval)
        self._socket_timeout_ms = _ms(socket_timeout)
        self._deadline_margin_ms = _ms(deadline_margin)
        self._late_hold_ms = _ms(late_hold)
        no_retry = Retry(NoBackoff(), 0)
        # The request path (allow's probe round trip): tight timeouts, no retries, so a hanging
        # Redis costs a caller at most ~socket_timeout.
        self._fast = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=no_retry,
            decode_responses=True,
        )
        # Everything off the request path (outcome batches, resync, console reads, reset): a short
        # hiccup must not flip the engine into degraded mode.
        self._client = redis.Redis.from_url(
            url,
            socket_timeout=background_timeout,
            socket_connect_timeout=background_timeout,
            retry=no_retry,
            decode_responses=True,
        )
        self._ps_client = redis.Redis.from_url(
            url, socket_timeout=5.0, socket_connect_timeout=1.0, retry=no_retry, decode_responses=True
        )
        self._shas: dict[str, str] = {}
        self._mirror: dict[tuple[str, str], _Mirror] = {}
        self._mirror_lock = threading.Lock()
        self._update_seq = 0
        self._registered: set[tuple[str, str]] = set()
        self._offset_ms = 0  # Redis TIME minus the local clock, measured at each resync
        self._real_offset_ms = 0  # Redis TIME minus time.time() (the same unless a test clock is injected)
        self._offset_rtt_ms = 0  # round trip of the TIME sample the offsets come from (bounds their error)
        self._measurements = 0  # offset measurements so far
        self._remeasuring = False
        # (provider, model, ticket) of probe round trips that timed out: released when Redis answers again.
        self._abandoned: list[tuple[str, str, str]] = []
        self._abandoned_lock = threading.Lock()
        # The probes Redis granted this process, by circuit, until their outcome is recorded: only those outcomes
        # go to Redis (a probe the local engine granted while Redis was unreachable never held Redis's slot, and
        # its generation may number another process's probe there). Under _state_lock.
        self._probes: dict[tuple[str, str], Decision] = {}
        # Outcomes of such probes that could not reach Redis (recorded while degraded, or their batch failed):
        # queued again when Redis answers, so the slot is closed, reopened or given back then, not held until the
        # probe timeout. Under _state_lock; one per circuit (an older probe's outcome would be stale anyway).
        self._unsent: dict[tuple[str, str], tuple[Decision, Outcome, float | None]] = {}
        self._degraded = False
        # True while allow() must look beyond the mirror: Redis unreachable, or operator holds configured.
        # One flag, so the hot path of a closed circuit makes the single check it made before holds existed.
        # Written under _state_lock (from both fields), read without it.
        self._detour = bool(self._config.controls)
        self._local: MemoryEngine | None = None
        self._state_lock = threading.Lock()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._dropped_logged = False
        self._stop = threading.Event()
        try:
            self._resync()
        except RedisError as exc:
            self._enter_degraded(exc)
        self._worker = threading.Thread(target=self._work, name="breaker-redis-outcomes", daemon=True)
        self._subscriber = threading.Thread(target=self._subscribe, name="breaker-redis-pubsub", daemon=True)
        self._worker.start()
        self._subscriber.start()

    # ----- keys and time -------------------------------------------------------------------------

    def _keys(self, provider: str, model: str) -> list[str]:
        # One hash tag per circuit: its three keys live in one cluster slot, so a script may touch them all.
        tag = f"{self._ns}:{{{circuit_tag(provider, model)}}}"
        return [f"{tag}:s", f"{tag}:w2", f"{tag}:f2", f"{tag}:t"]

    def _now_arg(self) -> str:
        return str(_ms(self._clock.now())) if self._time_override else ""

    def _now_estimate_ms(self) -> int:
        return _ms(self._clock.now()) + self._offset_ms

    @property
    def degraded(self) -> bool:
        """True while Redis is unreachable and decisions come from local state."""
        return self._degraded

    @property
    def config(self) -> ConfigSet:
        return self._config

    def configure(self, config: ConfigSet) -> None:
        with self._state_lock:
            # Holds: take the detour before the new config is visible, so a caller that can see a hold
            # (in a snapshot, say) is refused by it too.
            if config.controls:
                self._detour = True
            self._config = config
            self._detour = self._degraded or bool(config.controls)
        local = self._local
        if local is not None:
            local.configure(config)

    # ----- hot path ------------------------------------------------------------------------------

    def allow(self, provider: str, model: str) -> Decision:
        if self._detour:
            detoured = self._detoured(provider, model)
            if detoured is not None:
                return detoured
        key = (provider, model)
        entry = self._mirror.get(key)
        if entry is None:
            entry = self._mirror.setdefault(
                key, _Mirror(provider, model, None, probe_timeout_ms=self._probe_timeout_ms)
            )
        if entry.state is State.CLOSED:
            return entry.decision
        # _now_estimate_ms(), inline: an open circuit's refusal costs no further call.
        if round(self._clock.now() * 1000) + self._offset_ms < entry.refuse_until:
            return entry.refused
        return self._allow_slow(provider, model, entry)

    def record(self, decision: Decision, outcome: Outcome) -> None:
        if not decision.allowed:
            return
        if decision.probe:
            self._record_probe(decision, outcome)  # a probe's answer closes or reopens its circuit
            return
        if self._degraded and self._local_record(decision, outcome, self._clock.now()):
            return
        if self._queue.qsize() >= _MAX_PENDING:
            if not self._dropped_logged:
                self._dropped_logged = True
                log.warning("breaker: %d outcomes pending for Redis; dropping new ones", _MAX_PENDING)
            return
        # Test mode stamps the outcome now; production lets the script read Redis TIME.
        self._queue.put((decision, outcome, self._clock.now() if self._time_override else None))
        if self._urgent.is_set():
            return
        status = outcome.status
        if status is not None and 200 <= status < 300:
            return  # calm: the common case decides without the circuit's settings
        if classify(outcome, self._config.for_circuit(decision.provider, decision.model)) is Verdict.FAILURE:
            self._urgent.set()

    def _record_probe(self, decision: Decision, outcome: Outcome) -> None:
        """A probe's outcome: to Redis if Redis granted this process that probe (kept for later while Redis is
        unreachable), else to the local engine alone (while it decides)."""
        key = (decision.provider, decision.model)
        now = self._clock.now()
        with self._state_lock:
            ours = self._probes.get(key) is decision
            if ours:
                del self._probes[key]
        if self._degraded:
            self._local_record(decision, outcome, now)
        if ours:
            self._send_probe_outcome((decision, outcome, now if self._time_override else None))

    def _send_probe_outcome(self, item: tuple[Decision, Outcome, float | None]) -> None:
        """Queue a Redis-granted probe's outcome for the worker, or keep it until Redis answers again."""
        with self._state_lock:
            if self._degraded:
                self._unsent[(item[0].provider, item[0].model)] = item
                return
        self._queue.put(item)
        self._urgent.set()

    def _detoured(self, provider: str, model: str) -> Decision | None:
        """While holds are configured or Redis is unreachable: a held circuit's refusal, or the local decision
        when degraded; None when the mirror decides as usual."""
        # An operator's hold refuses every call and every probe, degraded or not. Holds on other circuits
        # cost two dict lookups.
        config = self._config
        controls = config.controls
        if controls and ((provider, model) in controls or (provider, "") in controls):
            held = self._held(config, provider, model)
            if held is not None:
                return held
        if self._degraded:
            return self._local_allow(provider, model)
        return None

    def _held(self, config: ConfigSet, provider: str, model: str) -> Decision | None:
        """The refusal of a circuit under an operator's hold at the engine clock's now, else None."""
        if config.control_for(provider, model, self._clock.now()) is None:
            return None
        entry = self._mirror.get((provider, model))
        if entry is None:
            return Decision(provider, model, False, State.OPEN, False, 0)
        return entry.held

    def _allow_slow(self, provider: str, model: str, entry: _Mirror) -> Decision:
        """allow() for a circuit that is not closed and whose local refusal (`refuse_until`) has run out."""
        # The cooldown may be over (by Redis TIME): only Redis can hand out the single probe slot.
        ticket = secrets.token_hex(8)
        try:
            raw = self._allow_on_redis(provider, model, ticket)
        except RedisError as exc:
            # The command may still reach Redis: release its ticket once Redis answers again.
            with self._abandoned_lock:
                if len(self._abandoned) < _MAX_ABANDONED:
                    self._abandoned.append((provider, model, ticket))
            self._enter_degraded(exc)
            return self._local_allow(provider, model)
        fields = _Fields(raw[2 : 2 + _FIELDS])
        self._mirror_update(provider, model, fields)
        if raw[0] == "late":
            self._on_late(provider, model, fields.gen)
        allowed, probe = raw[0] == "1", raw[1] == "1"
        decision = Decision(provider, model, allowed, fields.state, probe, fields.gen)
        if probe and fields.probe_at is not None:
            # This call's script granted the slot: this process, and no other, reports the transition.
            self.events.add(BreakerEvent(EventKind.HALF_OPEN, provider, model, fields.probe_at / 1000, fields.gen))
            with self._state_lock:
                self._probes[(provider, model)] = decision
        return decision

    def _allow_on_redis(self, provider: str, model: str, ticket: str) -> list[str]:
        """One `allow` round trip on the request-path connection, with the caller's deadline.

        The deadline (Redis TIME) is taken once the connection is ready, so (re)connecting does not eat into
        it: when this call stops waiting (socket timeout), plus a margin for the error of the clock offset
        (half the round trip of its TIME sample, plus `deadline_margin` for a GIL wait, a clock step...).
        A script that runs later (the command sat in a frozen connection) grants nothing and replies `late`;
        one that runs inside the margin after the caller gave up is freed by the ticket release.
        """
        keys = self._keys(provider, model)
        pool = self._fast.connection_pool
        conn = pool.get_connection()
        try:
            deadline = (
                _ms(time.time())
                + self._real_offset_ms
                + self._socket_timeout_ms
                + self._deadline_margin_ms
                + (self._offset_rtt_ms + 1) // 2
            )
            args = self._args(provider, model, str(self._probe_timeout_ms), str(deadline), ticket)
            try:
                return self._evalsha_on(conn, "allow", keys, args)
            except (NoScriptError, KeyError):
                self._load_scripts()  # Redis restarted or flushed its script cache
                return self._evalsha_on(conn, "allow", keys, args)
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()  # a reply may still come: it must never be read as another command's
            raise
        finally:
            pool.release(conn)

    def _evalsha_on(self, conn: Any, script: str, keys: list[str], args: list[str]) -> list[str]:
        conn.send_command("EVALSHA", self._shas[script], len(keys), *keys, *args)
        return self._fast.parse_response(conn, "EVALSHA")  # type: ignore[no-any-return]  # redis: Any

    def _on_late(self, provider: str, model: str, gen: int) -> None:
        """A grant refused as late: hold the circuit locally for a while and re-measure the clock offset.

        Without the hold, every request to this circuit would make its own (refused) round trip until the
        next resync, each one on the caller's event loop.
        """
        hold_until = self._now_estimate_ms() + self._late_hold_ms
        with self._mirror_lock:
            entry = self._mirror.get((provider, model))
            if entry is not None and entry.gen == gen:
                entry.hold(hold_until)
        with self._state_lock:
            if self._remeasuring:
                return
            self._remeasuring = True
        log.warning(
            "breaker: Redis refused the probe of %s/%s as late (clock offset %d ms is off?); re-measuring it",
            provider,
            model,
            self._real_offset_ms,
        )
        threading.Thread(target=self._remeasure, name="breaker-redis-clock", daemon=True).start()

    def _remeasure(self) -> None:
        try:
            self._measure_offset()
        except RedisError as exc:
            self._enter_degraded(exc)
        finally:
            with self._state_lock:
                self._remeasuring = False

    # ----- Redis plumbing ------------------------------------------------------------------------

    def _load_scripts(self) -> None:
        self._shas = {name: self._client.script_load(src) for name, src in SCRIPTS.items()}

    def _args(self, provider: str, model: str, *extra: str) -> list[str]:
        return [self._now_arg(), self._channel, provider, model, *extra]

    def _eval(self, script: str, provider: str, model: str, *extra: str) -> list[str]:
        client = self._client
        keys = self._keys(provider, model)
        args = self._args(provider, model, *extra)
        reply: list[str]  # the scripts return arrays of strings (decode_responses)
        try:
            reply = client.evalsha(self._shas[script], len(keys), *keys, *args)
        except (NoScriptError, KeyError):
            self._load_scripts()  # Redis restarted or flushed its script cache
            reply = client.evalsha(self._shas[script], len(keys), *keys, *args)
        return reply

    def _mirror_update(self, provider: str, model: str, fields: _Fields) -> None:
        key = (provider, model)
        with self._mirror_lock:
            current = self._mirror.get(key)
            # Generations only grow; an older message arriving late must not roll the mirror back.
            if current is None or fields.gen >= current.gen:
                self._update_seq += 1
                fresh = _Mirror(provider, model, fields, self._update_seq, probe_timeout_ms=self._probe_timeout_ms)
                if current is not None and fields.gen == current.gen:
                    fresh.hold(current.hold_until)  # nothing changed: keep a late grant's hold
                self._mirror[key] = fresh

    def _keep_abandoned(self, items: list[tuple[str, str, str]]) -> None:
        """Put tickets whose release failed back, before those abandoned since (the newest `_MAX_ABANDONED` stay)."""
        with self._abandoned_lock:
            self._abandoned = (items + self._abandoned)[-_MAX_ABANDONED:]

    def _release_abandoned(self) -> None:
        """Release the ticket of every probe round trip that timed out (raises RedisError if Redis fails again).

        If a late allow granted the slot, it is freed now; if it has not arrived yet, it will grant nothing.
        One pipeline, one script call per circuit with all of its tickets. The list is taken out under the
        lock, so concurrent resyncs release disjoint tickets; tickets whose call failed go back.
        """
        with self._abandoned_lock:
            pending, self._abandoned = self._abandoned, []
        if not pending:
            return
        tickets: dict[tuple[str, str], list[str]] = {}
        for provider, model, ticket in pending:
            tickets.setdefault((provider, model), []).append(ticket)
        remember = str(self._probe_timeout_ms)
        pipe = self._client.pipeline(transaction=False)
        for (provider, model), some in tickets.items():
            keys = self._keys(provider, model)
            pipe.evalsha(self._shas["release"], len(keys), *keys, *self._args(provider, model, remember, *some))
        try:
            results = pipe.execute(raise_on_error=False)
        except RedisError:
            self._keep_abandoned(pending)
            raise
        failed: list[tuple[str, str, str]] = []
        for ((provider, model), some), raw in zip(tickets.items(), results, strict=True):
            if isinstance(raw, Exception):
                log.warning("breaker: releasing %d probe tickets of %s/%s failed: %s", len(some), provider, model, raw)
                failed.extend((provider, model, ticket) for ticket in some)
            elif raw[0] == "released":
                self._mirror_update(provider, model, _Fields(raw[1 : 1 + _FIELDS]))
                log.info("breaker: released the probe slot of %s/%s taken by a timed-out call", provider, model)
        if failed:
            self._keep_abandoned(failed)

    def _measure_offset(self) -> None:
        """Redis TIME minus the local clocks, from the TIME sample with the shortest round trip.

        The error of one sample is at most half its round trip; a sample delayed on its way (the network,
        this thread waiting for the GIL) has a long round trip and is not kept.
        """
        best: tuple[float, float, float, float] | None = None
        for _ in range(_OFFSET_SAMPLES):
            t0 = self._clock.now()
            r0 = time.time()
            seconds, micros = self._client.time()
            r1 = time.time()
            t1 = self._clock.now()
            redis_ms = seconds * 1000 + micros / 1000
            if best is None or r1 - r0 < best[0]:
                best = (r1 - r0, redis_ms, (r0 + r1) / 2, (t0 + t1) / 2)
        assert best is not None
        rtt, redis_ms, real_mid, clock_mid = best
        self._real_offset_ms = round(redis_ms - real_mid * 1000)
        self._offset_rtt_ms = math.ceil(rtt * 1000)
        if not self._time_override:
            self._offset_ms = round(redis_ms - clock_mid * 1000)
        self._measurements += 1

    def _resync(self) -> None:
        """Reload every tracked circuit from Redis and swap the mirror in one step."""
        self._load_scripts()
        self._release_abandoned()
        started_seq = self._update_seq
        self._measure_offset()
        members = sorted(self._client.smembers(self._registry))
        pairs = [tuple(json.loads(m)) for m in members]
        pipe = self._client.pipeline(transaction=False)
        for provider, model in pairs:
            pipe.hmget(
                self._keys(provider, model)[0],
                ["state", "gen", "opened_at", "cooldown_until", "consec", "lf_at", "lf_label", "probe_at"],
            )
        rows = pipe.execute() if pairs else []
        mirror: dict[tuple[str, str], _Mirror] = {}
        for (provider, model), row in zip(pairs, rows, strict=True):
            if row[0] is None:
                continue
            fields = _Fields([v or "" for v in row])
            mirror[(provider, model)] = _Mirror(provider, model, fields, probe_timeout_ms=self._probe_timeout_ms)
        for (provider, model), fields in self._restore_lost(mirror):
            mirror[(provider, model)] = _Mirror(provider, model, fields, probe_timeout_ms=self._probe_timeout_ms)
            pairs.append((provider, model))
        with self._mirror_lock:
            # Keep entries updated while we were reading if they are newer than what we read.
            for key, entry in self._mirror.items():
                fresh = mirror.get(key)
                if entry.seq > started_seq and (fresh is None or entry.gen > fresh.gen):
                    mirror[key] = entry
            self._mirror = mirror
        self._registered = {(p, m) for p, m in pairs}

    def _restore_lost(self, found: dict[tuple[str, str], _Mirror]) -> list[tuple[tuple[str, str], _Fields]]:
        """Open circuits this process knew whose cooldown is still running and that Redis no longer has (it came
        back empty, or was flushed): put them back, so an outage of Redis does not close every open circuit on
        every gateway at once. What else Redis lost (windows, closed circuits) starts again from nothing."""
        now = self._now_estimate_ms()
        with self._mirror_lock:
            lost = [
                (key, entry)
                for key, entry in self._mirror.items()
                if key not in found
                and entry.state is State.OPEN
                and entry.cooldown_until is not None
                and entry.cooldown_until > now
            ]
        restored = []
        for (provider, model), entry in lost:
            raw = self._eval(
                "restore",
                provider,
                model,
                str(entry.gen),
                "" if entry.opened_at is None else str(entry.opened_at),
                str(entry.cooldown_until),
                str(entry.consec),
                "",
                "",
            )
            self._client.sadd(self._registry, json.dumps([provider, model]))
            restored.append(((provider, model), _Fields(raw[1:])))
            if raw[0] == "1":
                log.warning("breaker: Redis had lost open circuit %s/%s; restored it", provider, model)
        return restored

    def refresh(self, provider: str, model: str) -> None:
        """Reload one circuit into the mirror now (instead of waiting for its next pub/sub message)."""
        try:
            raw = self._eval("snapshot", provider, model, self._window_ms(provider, model))
        except RedisError as exc:
            self._enter_degraded(exc)
            return
        if raw[0] == "1":
            self._mirror_update(provider, model, _Fields(raw[4:]))

    def resync(self) -> bool:
        """Reload the mirror now (and leave degraded mode if Redis answers). True on success."""
        try:
            self._resync()
        except RedisError as exc:
            self._enter_degraded(exc)
            return False
        self._leave_degraded()
        return True

    # ----- degraded mode -------------------------------------------------------------------------

    def _enter_degraded(self, exc: BaseException) -> None:
        with self._state_lock:
            if self._degraded:
                return
            # Its transitions go to this engine's buffer, marked local: no other process saw them.
            local = MemoryEngine(
                clock=self._clock,
                config=self._config,
                probe_timeout_seconds=self._probe_timeout_seconds,
                events=self.events,
                local=True,
            )
            # Carry what the mirror knows so open circuits stay open (times converted to the local clock).
            for (provider, model), entry in list(self._mirror.items()):
                local.seed(
                    provider=provider,
                    model=model,
                    state=entry.state,
                    generation=entry.gen,
                    consecutive_opens=entry.consec,
                    cooldown_until=self._local_seconds(entry.cooldown_until),
                    opened_at=self._local_seconds(entry.opened_at),
                )
            self._local = local
            self._degraded = True
            self._detour = True
        log.warning("breaker: Redis unreachable (%s); deciding from local state until it returns", exc)

    def _leave_degraded(self) -> None:
        with self._state_lock:
            if not self._degraded:
                return
            self._degraded = False
            self._detour = bool(self._config.controls)
            self._local = None
            unsent, self._unsent = self._unsent, {}
        for item in unsent.values():
            self._queue.put(item)
        if unsent:
            self._urgent.set()
        log.warning("breaker: Redis reachable again; circuits resynchronised")

    def _local_seconds(self, redis_ms: int | None) -> float | None:
        return None if redis_ms is None else (redis_ms - self._offset_ms) / 1000

    # The caller read `_degraded` true; Redis may have come back since (`_leave_degraded` in another thread), and
    # the local engine gone with it. Each of these then answers as if Redis had not gone: the mirror, which the
    # resync has just reloaded, decides; an outcome goes to Redis. (`_enter_degraded` sets `_local` before the
    # flag, so the retry finds an engine unless Redis came and went again meanwhile.)

    def _local_allow(self, provider: str, model: str) -> Decision:
        local = self._local
        if local is None:
            return self.allow(provider, model)
        return local.allow(provider, model)

    def _local_record(self, decision: Decision, outcome: Outcome, at: float) -> bool:
        """Apply an outcome to the local engine; False when there is none (Redis is back): the caller decides
        where the outcome goes then."""
        local = self._local
        if local is None:
            return False
        local.apply(decision, outcome, at)
        return True

    # ----- outcome worker ------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the outcomes recorded so far are applied and the events emitted so far are shipped.

        Events whose ship failed (or that wait while Redis is unreachable) stay buffered for the next try;
        this does not wait for them.
        """
        marker = _Flush()
        self._queue.put(marker)
        self._urgent.set()
        self._hurry.set()
        return marker.done.wait(timeout)

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self._ship_interval)
            except queue.Empty:
                # No outcomes for a while: events (a probe grant, a local transition) must not wait for them.
                self._ship_pending()
                continue
            if isinstance(item, tuple) and self._gather_interval > 0:
                self._urgent.wait(self._calm_interval)
                self._hurry.wait(self._gather_interval)
            # Cleared before draining: an urgent outcome queued from here on is in this batch or sets it again.
            self._urgent.clear()
            self._hurry.clear()
            batch: list[Any] = [item]
            while len(batch) < _BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            outcomes = [b for b in batch if isinstance(b, tuple)]
            if outcomes:
                try:
                    self._send(outcomes)
                except Exception as exc:  # this thread must survive anything
                    redis_error = isinstance(exc, RedisError)
                    if redis_error:
                        self._enter_degraded(exc)
                    else:
                        log.exception("breaker: sending outcomes failed")
                    self._apply_locally(outcomes, keep_probes=redis_error)
            # The events of this batch's own transitions, and any it did not carry.
            self._ship_pending()
            for b in batch:
                if isinstance(b, _Flush):
                    b.done.set()
            if any(b is _STOP for b in batch):
                return

    def _xadd(self, pipe: Any, event: BreakerEvent) -> None:
        pipe.xadd(
            self._history, {HISTORY_FIELD: orjson.dumps(event.as_record())}, maxlen=HISTORY_MAXLEN, approximate=True
        )

    def _shipped(self, events: list[BreakerEvent], results: list[Any]) -> list[BreakerEvent]:
        """The events whose XADD failed (to requeue), logging the first failure of a streak."""
        failed = [event for event, result in zip(events, results, strict=True) if isinstance(result, Exception)]
        if failed and not self._ship_error_logged:
            self._ship_error_logged = True
            error = next(r for r in results if isinstance(r, Exception))
            log.warning("breaker: shipping %d circuit events failed (%s); keeping them to retry", len(failed), error)
        elif not failed:
            self._ship_error_logged = False
        return failed

    def _ship_pending(self) -> None:
        """Ship every buffered event on its own pipeline (worker thread only); a failed ship requeues."""
        events = self.events
        while len(events) and not self._degraded:
            batch = events.drain()
            try:
                pipe = self._client.pipeline(transaction=False)
                for event in batch:
                    self._xadd(pipe, event)
                failed = self._shipped(batch, pipe.execute(raise_on_error=False))
            except Exception as exc:  # this thread must survive anything
                events.requeue(batch)
                if isinstance(exc, RedisError):
                    self._enter_degraded(exc)
                else:
                    log.exception("breaker: shipping circuit events failed")
                return
            if failed:
                events.requeue(failed)
                return

    def _calls(self, outcomes: list[tuple[Decision, Outcome, float | None]]) -> list[tuple[Decision, list[str]]]:
        """The `record` calls of a batch: one per probe outcome, one per circuit and generation for the rest.

        A closed circuit's outcomes keep their order as runs of (verdict, label, count), so the script
        applies them exactly as one call each would; in test mode outcomes stamped at different times
        go in different calls. Only outcomes of the generation a call names can count, so grouping by
        generation (and keeping probes apart) changes nothing but the number of calls.
        """
        groups: dict[tuple[str, str, int, float | None], list[list[Any]]] = {}
        calls: list[tuple[Decision, BreakerSettings, float | None, list[list[Any]]]] = []
        config = self._config
        for decision, outcome, at in outcomes:
            settings = config.for_circuit(decision.provider, decision.model)
            verdict = classify(outcome, settings).value
            if decision.probe:
                calls.append((decision, settings, at, [[verdict, outcome.label, 1]]))
                continue
            if verdict == Verdict.IGNORE:
                continue
            key = (decision.provider, decision.model, decision.generation, at)
            runs = groups.get(key)
            if runs is None:
                runs = groups[key] = []
                calls.append((decision, settings, at, runs))
            if runs and runs[-1][0] == verdict and runs[-1][1] == outcome.label:
                runs[-1][2] += 1
            else:
                runs.append([verdict, outcome.label, 1])
        return [(decision, self._record_args(decision, settings, at, runs)) for decision, settings, at, runs in calls]

    def _record_args(
        self, decision: Decision, settings: BreakerSettings, at: float | None, runs: list[list[Any]]
    ) -> list[str]:
        return [
            "" if at is None else str(_ms(at)),
            self._channel,
            decision.provider,
            decision.model,
            str(decision.generation),
            "1" if decision.probe else "0",
            str(settings.failure_threshold),
            str(settings.window_seconds * 1000),
            str(settings.minimum_requests),
            str(settings.initial_cooldown_seconds * 1000),
            str(settings.cooldown_cap_seconds * 1000),
            *(str(value) for run in runs for value in run),
        ]

    def _apply_locally(self, outcomes: list[tuple[Decision, Outcome, float | None]], *, keep_probes: bool) -> None:
        """Outcomes that did not reach Redis go to the local engine; with `keep_probes`, a probe's outcome (queued
        only for a probe Redis granted) is also kept for Redis, where its slot stays held until it arrives."""
        for item in outcomes:
            decision, outcome, at = item
            self._local_record(decision, outcome, at if at is not None else self._clock.now())
            if keep_probes and decision.probe:
                self._send_probe_outcome(item)

    def _send(self, outcomes: list[tuple[Decision, Outcome, float | None]]) -> None:
        if self._degraded:
            self._apply_locally(outcomes, keep_probes=True)
            return
        calls = self._calls(outcomes)
        if not calls:
            return
        # Events waiting since the last ship ride along in the same pipeline; whatever is not shipped
        # (the pipeline failed, an XADD failed) goes back to the buffer.
        events = self.events.drain()
        try:
            for attempt in (1, 2):
                pipe = self._client.pipeline(transaction=False)
                new = {(d.provider, d.model) for d, _ in calls} - self._registered
                for provider, model in new:
                    pipe.sadd(self._registry, json.dumps([provider, model]))
                for decision, args in calls:
                    keys = self._keys(decision.provider, decision.model)
                    pipe.evalsha(self._shas["record"], len(keys), *keys, *args)
                for event in events:
                    self._xadd(pipe, event)
                replies = pipe.execute(raise_on_error=False)
                results = replies[len(new) : len(new) + len(calls)]
                events = self._shipped(events, replies[len(new) + len(calls) :])
                if attempt == 1 and any(isinstance(r, NoScriptError) for r in results):
                    self._load_scripts()
                    continue
                self._registered |= new
                for (decision, _), result in zip(calls, results, strict=True):
                    if isinstance(result, Exception):
                        log.error(
                            "breaker: recording an outcome for %s/%s failed: %s",
                            decision.provider,
                            decision.model,
                            result,
                        )
                        continue
                    if result[0] != "counted":
                        self._on_recorded(decision, result)
                return
        finally:
            self.events.requeue(events)

    def _on_recorded(self, decision: Decision, result: list[str]) -> None:
        """Apply a `record` reply that changed the circuit; a 'transition' is this process's to report."""
        fields = _Fields(result[_RECORD_HEAD : _RECORD_HEAD + _FIELDS])
        self._mirror_update(decision.provider, decision.model, fields)
        if result[0] != "transition":
            return
        if not decision.probe:
            kind = EventKind.OPENED
        elif fields.state is State.CLOSED:
            kind = EventKind.CLOSED
        else:
            kind = EventKind.REOPENED
        cooldown = None
        if kind is not EventKind.CLOSED and fields.cooldown_until is not None and fields.opened_at is not None:
            cooldown = (fields.cooldown_until - fields.opened_at) / 1000
        self.events.add(
            BreakerEvent(
                kind=kind,
                provider=decision.provider,
                model=decision.model,
                at=int(result[1]) / 1000,
                generation=fields.gen,
                failures=_int(result[2]) if kind is EventKind.OPENED else None,
                total=_int(result[3]) if kind is EventKind.OPENED else None,
                last_status=fields.lf_label if kind is not EventKind.CLOSED else "",
                cooldown_seconds=cooldown,
            )
        )

    # ----- subscriber: transitions, config changes, reconnects -----------------------------------

    def _subscribe(self) -> None:
        backoff = self._reconnect_interval
        while not self._stop.is_set():
            pubsub = self._ps_client.pubsub(ignore_subscribe_messages=True)
            try:
                channels = [self._channel] + ([self._config_channel] if self._config_channel else [])
                pubsub.subscribe(*channels)
                # Subscribe first, then reload: no transition can fall between the two. The configuration
                # too: a change published while this subscriber was away (or before it first subscribed)
                # reached no one here.
                self.resync_or_raise()
                self._reload_config(0)
                backoff = self._reconnect_interval
                next_resync = time.monotonic() + self._resync_interval
                next_config_retry = time.monotonic() + self._reconnect_interval
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._on_message(message)
                    if time.monotonic() >= next_resync or self._degraded:
                        self.resync_or_raise()
                        next_resync = time.monotonic() + self._resync_interval
                    if self._config_stale and time.monotonic() >= next_config_retry:
                        self._reload_config(0)
                        next_config_retry = time.monotonic() + self._reconnect_interval
            except RedisError as exc:
                self._enter_degraded(exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_reconnect_interval)
            except Exception:  # never let the subscriber die
                log.exception("breaker: subscriber failed")
                self._stop.wait(backoff)
            finally:
                try:
                    pubsub.close()
                except Exception:  # noqa: BLE001, S110 - closing a broken connection
                    pass

    def resync_or_raise(self) -> None:
        self._resync()
        self._leave_degraded()

    def _on_message(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        if message["channel"] == self._channel:
            if not message["data"]:
                return  # the wake-up `close()` sends
            data = json.loads(message["data"])
            self._mirror_update(data["p"], data["m"], _Fields(data["f"]))
        elif self._config_loader is not None:
            try:
                version = int(message["data"])
            except (TypeError, ValueError):
                version = 0
            self._reload_config(version)

    def _reload_config(self, version: int) -> None:
        """Read and apply the configuration a published `version` names (0 = unknown: read it); on a failed read
        keep the old thresholds and holds, and mark them stale so the subscriber tries again."""
        if self._config_loader is None:
            return
        with self._config_lock:
            try:
                config = self._config_loader(version)
            except ConfigUnreadable:  # the loader has said why
                self._config_stale = True
                return
            except Exception:  # keep the old thresholds rather than stop following
                if not self._config_stale:
                    log.exception("breaker: reloading the breaker configuration failed; retrying")
                self._config_stale = True
                return
            self._config_stale = False
            if config is not None:
                self.configure(config)

    # ----- reads and reset -----------------------------------------------------------------------

    def _snapshot(self, provider: str, model: str, now_ms: int, fails: int, total: int, f: _Fields) -> CircuitSnapshot:
        state = f.state
        probe_in_flight = False
        if state is State.OPEN and f.cooldown_until is not None and now_ms >= f.cooldown_until:
            state = State.HALF_OPEN
        elif state is State.HALF_OPEN:
            probe_in_flight = f.probe_at is not None and now_ms < f.probe_at + self._probe_timeout_ms
        return CircuitSnapshot(
            provider=provider,
            model=model,
            state=state,
            failure_count=fails,
            total_requests=total,
            cooldown_until=to_datetime(f.cooldown_until / 1000) if f.cooldown_until is not None else None,
            consecutive_opens=f.consec,
            last_failure_at=to_datetime(f.lf_at / 1000) if f.lf_at is not None else None,
            last_failure_status=label_to_status(f.lf_label),
            opened_at=to_datetime(f.opened_at / 1000) if f.opened_at is not None else None,
            generation=f.gen,
            probe_in_flight=probe_in_flight,
            # Holds are decided on the engine clock, as allow() does.
            control=self._config.control_for(provider, model, self._clock.now()),
        )

    def _window_ms(self, provider: str, model: str) -> str:
        return str(self._config.for_circuit(provider, model).window_seconds * 1000)

    def hold(self, provider: str, model: str) -> Control | None:
        return self._config.control_for(provider, model, self._clock.now())

    def get(self, provider: str, model: str) -> CircuitSnapshot:
        if not self._degraded:
            try:
                raw = self._eval("snapshot", provider, model, self._window_ms(provider, model))
                return self._snapshot(provider, model, int(raw[1]), int(raw[2]), int(raw[3]), _Fields(raw[4:]))
            except RedisError as exc:
                self._enter_degraded(exc)
        local = self._local
        if local is None:
            return self.get(provider, model)
        return local.get(provider, model)

    def list_circuits(self) -> list[CircuitSnapshot]:
        if not self._degraded:
            try:
                return self._list_from_redis()
            except NoScriptError:
                self._load_scripts()
                return self._list_from_redis()
            except RedisError as exc:
                self._enter_degraded(exc)
        local = self._local
        if local is None:
            return self.list_circuits()
        return local.list_circuits()

    def _list_from_redis(self) -> list[CircuitSnapshot]:
        pairs = sorted(tuple(json.loads(m)) for m in self._client.smembers(self._registry))
        if not pairs:
            return []
        pipe = self._client.pipeline(transaction=False)
        for provider, model in pairs:
            keys = self._keys(provider, model)
            args = self._args(provider, model, self._window_ms(provider, model))
            pipe.evalsha(self._shas["snapshot"], len(keys), *keys, *args)
        rows = []
        for (provider, model), raw in zip(pairs, pipe.execute(), strict=True):
            if raw[0] == "1":
                rows.append(self._snapshot(provider, model, int(raw[1]), int(raw[2]), int(raw[3]), _Fields(raw[4:])))
        return rows

    def reset(self, provider: str, model: str) -> ResetResult:
        # No local fallback: Redis is the truth again once it returns, so a reset made only here would be
        # dropped then, with the circuit still open on every gateway.
        if self._degraded:
            raise BreakerUnavailable("Redis is unreachable")
        try:
            # Register first: a registered circuit without state reads as untracked, never the other way round.
            self._client.sadd(self._registry, json.dumps([provider, model]))
            raw = self._eval("reset", provider, model, self._window_ms(provider, model))
        except RedisError as exc:
            self._enter_degraded(exc)
            raise BreakerUnavailable(f"Redis is unreachable ({exc})") from exc
        now = int(raw[0])
        before = self._snapshot(provider, model, now, int(raw[1]), int(raw[2]), _Fields(raw[3 : 3 + _FIELDS]))
        fresh = _Fields(raw[3 + _FIELDS :])
        self._mirror_update(provider, model, fresh)
        return ResetResult(before=before, after=self._snapshot(provider, model, now, 0, 0, fresh))

    def close(self) -> None:
        self._stop.set()
        self._queue.put(_STOP)
        self._urgent.set()
        self._hurry.set()
        try:
            self._client.publish(self._channel, "")  # wake the subscriber out of its wait
        except RedisError:
            pass
        self._worker.join(timeout=5)
        self._subscriber.join(timeout=5)
        self._fast.close()
        self._client.close()
        self._ps_client.close()
