"""The alert evaluator: finds each enabled rule's firing subjects, opens, updates and resolves alerts.

`alerts_evaluate(now)` is a plain function (the `alerts.evaluate` task calls it every 30 s with the current
time; tests call it with theirs). Each rule is evaluated in its own transaction with the rule's row locked,
so two evaluators running at once serialise per rule, and the partial unique constraint keeps one firing
alert per (rule, subject) in any case.

Conditions:
- circuit_open: a circuit not closed (open or half-open) for at least N minutes and not held by an operator
  (a forced-open or drained circuit is deliberate). Its outage is counted from its first opening in the
  current run: a circuit that re-opened after failed probes has opened_at reset, so the cooldowns of its
  earlier opens in the run are added back (a lower bound: the probes' own seconds are not counted).
- degraded: over the last M minutes, a source model with at least V requests of which more than X% were
  served by a chain entry, unless its primary circuit (the model's catalog provider, the model) is held by
  an operator now: a forced-open primary or a drained provider sends the traffic to fallbacks on purpose.
- exhausted: over the last M minutes, at least K requests of a source model that found every chain entry
  unavailable and were sent to the primary anyway (the optimistic primary), whatever their status. A plain
  failure of a target that was tried is not exhaustion (nothing else was tried; the breaker counts it).
An alert resolves once its condition has been clear at every evaluation for a full window (N or M minutes,
counted from the first evaluation that found it clear).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from alerts.models import Alert, AlertRule, AlertState, RuleKind
from alerts.services import alert_open, alert_resolve, clear_window
from catalog.selectors import llm_model_list
from health.breaker import ConfigSet, State, get_engine
from health.selectors import CircuitRow, circuit_controls, circuit_list, circuits_local_only
from requestlogs.aggregates import SourceTraffic, traffic_by_source

log = logging.getLogger(__name__)


@dataclass
class EvaluationResult:
    """What one evaluation did: alert ids opened, updated (still firing) and resolved."""

    rules: int = 0
    opened: list[int] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    """One subject for which a rule's condition holds now, with its figures and a sentence about it."""

    subject: str
    figures: dict[str, Any]
    summary: str


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes >= 10 else f"{minutes:.1f} min"


class CircuitsUnavailable(Exception):
    """The circuits' shared state cannot be read now: the rules that read it are skipped."""


class _Inputs:
    """Reads shared by the rules of one evaluation, each made at most once (per window for traffic)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._circuits: list[CircuitRow] | None = None
        self._holds: ConfigSet | None = None
        self._providers: dict[str, str] | None = None
        self._traffic: dict[int, dict[str, SourceTraffic]] = {}

    def circuits(self) -> list[CircuitRow]:
        if self._circuits is None:
            circuits = circuit_list()
            if circuits_local_only():
                # Redis is away and the listing fell back to this process's own view (empty in a worker that
                # serves no traffic): read as "every circuit closed", it resolved every firing alert.
                raise CircuitsUnavailable("the breaker's shared state (Redis) is unreachable")
            self._circuits = circuits
        return self._circuits

    def held(self, provider: str, model: str) -> bool:
        if self._holds is None:
            self._holds = ConfigSet(controls=circuit_controls())
        return self._holds.control_for(provider, model, self.now.timestamp()) is not None

    def primary_held(self, source: str) -> bool:
        """Whether the primary circuit of a source model (its catalog provider, the model) is held now."""
        if self._providers is None:
            self._providers = dict(llm_model_list().values_list("name", "provider__name"))
        provider = self._providers.get(source)
        return provider is not None and self.held(provider, source)

    def traffic(self, minutes: int) -> dict[str, SourceTraffic]:
        """Requests per source model over the last `minutes` (the per-minute aggregates, not the raw rows)."""
        if minutes not in self._traffic:
            self._traffic[minutes] = traffic_by_source(since=self.now - timedelta(minutes=minutes), until=self.now)
        return self._traffic[minutes]


def _outage_start(row: CircuitRow) -> datetime | None:
    if row.opened_at is None:
        return None
    earlier = 0
    if row.consecutive_opens > 1:
        settings = get_engine().config.for_circuit(row.provider, row.model)
        earlier = sum(settings.cooldown_for(n) for n in range(1, row.consecutive_opens))
    return row.opened_at - timedelta(seconds=earlier)


def _circuit_open(rule: AlertRule, inputs: _Inputs) -> list[Finding]:
    found = []
    for row in inputs.circuits():
        if row.state is State.CLOSED:
            continue
        if (rule.provider and row.provider != rule.provider) or (rule.model and row.model != rule.model):
            continue
        start = _outage_start(row)
        if start is None or inputs.held(row.provider, row.model):
            continue
        seconds = (inputs.now - start).total_seconds()
        if seconds < rule.minutes * 60:
            continue
        subject = f"{row.provider}/{row.model}"
        figures = {
            "provider": row.provider,
            "model": row.model,
            "state": str(row.state),
            "open_since": start.isoformat(),
            "open_minutes": round(seconds / 60, 1),
            "consecutive_opens": row.consecutive_opens,
            "last_failure_status": row.last_failure_status,
            "threshold_minutes": rule.minutes,
        }
        summary = f"Circuit {subject} has been open for {_minutes(seconds)} (rule: longer than {rule.minutes} min)."
        found.append(Finding(subject, figures, summary))
    return found


def _degraded(rule: AlertRule, inputs: _Inputs) -> list[Finding]:
    found = []
    threshold = rule.threshold_percent or 0.0
    minimum = rule.min_requests or 1
    for source, t in sorted(inputs.traffic(rule.minutes).items()):
        if rule.model and source != rule.model:
            continue
        if t.requests < minimum or t.requests == 0:
            continue
        share = 100.0 * t.fallback / t.requests
        if share <= threshold or inputs.primary_held(source):
            continue
        figures = {
            "source_model": source,
            "requests": t.requests,
            "fallback": t.fallback,
            "fallback_percent": round(share, 1),
            "window_minutes": rule.minutes,
            "threshold_percent": threshold,
            "min_requests": minimum,
        }
        summary = (
            f"{source}: {share:.0f}% of {t.requests} requests served by a fallback in the last {rule.minutes} min "
            f"(rule: above {threshold:g}% with at least {minimum} requests)."
        )
        found.append(Finding(source, figures, summary))
    return found


def _exhausted(rule: AlertRule, inputs: _Inputs) -> list[Finding]:
    found = []
    minimum = rule.min_count or 1
    for source, t in sorted(inputs.traffic(rule.minutes).items()):
        if rule.model and source != rule.model:
            continue
        # Every chain entry unavailable, the primary tried anyway. (A request that walks the whole chain and
        # fails needs an in-request policy that tries several entries; the gateway does not do that yet.)
        count = t.optimistic
        if count < minimum:
            continue
        figures = {
            "source_model": source,
            "requests": t.requests,
            "optimistic": t.optimistic,
            "failed": t.failed,  # failures of a served target, for context: not exhaustion
            "exhausted": count,
            "window_minutes": rule.minutes,
            "min_count": minimum,
        }
        summary = (
            f"{source}: {count} of {t.requests} requests found every chain entry unavailable and were sent to "
            f"the primary anyway in the last {rule.minutes} min (rule: at least {minimum})."
        )
        found.append(Finding(source, figures, summary))
    return found


CONDITIONS: dict[str, Callable[[AlertRule, _Inputs], list[Finding]]] = {
    RuleKind.CIRCUIT_OPEN: _circuit_open,
    RuleKind.DEGRADED: _degraded,
    RuleKind.EXHAUSTED: _exhausted,
}


def _apply(rule_id: int, findings: list[Finding], now: datetime, result: EvaluationResult) -> None:
    """Open, update and resolve one rule's alerts for what was found, in one transaction."""
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(pk=rule_id, enabled=True).first()
        if rule is None:
            return  # disabled or deleted since it was read: its alerts were resolved then
        firing = {a.subject: a for a in Alert.objects.select_for_update().filter(rule=rule, state=AlertState.FIRING)}
        # Two evaluations can run at once (Celery): one that read its figures at an earlier `now` and locked the
        # rule last must not undo what the later one recorded (its "clear since" would end the window early).
        stale = {subject for subject, a in firing.items() if a.last_seen_at > now or (a.clear_since or now) > now}
        if any(finding.subject not in firing for finding in findings):
            # The same for an alert that evaluation resolved: reopened from these older figures, it would be an
            # alert dated before the resolution it follows, notified as a new outage.
            stale |= set(
                Alert.objects.filter(rule=rule, state=AlertState.RESOLVED, resolved_at__gt=now).values_list(
                    "subject", flat=True
                )
            )
        for finding in findings:
            alert = firing.pop(finding.subject, None)
            if finding.subject in stale:
                continue
            if alert is None:
                opened = alert_open(
                    rule=rule, subject=finding.subject, figures=finding.figures, summary=finding.summary, now=now
                )
                if opened is not None:
                    result.opened.append(opened.pk)
                continue
            alert.figures = finding.figures
            alert.summary = finding.summary[:500]
            alert.last_seen_at = now
            alert.clear_since = None
            alert.save(update_fields=["figures", "summary", "last_seen_at", "clear_since"])
            result.updated.append(alert.pk)
        window = clear_window(rule)
        for alert in firing.values():
            if alert.subject in stale:
                continue
            if alert.clear_since is None:
                alert.clear_since = now
                alert.save(update_fields=["clear_since"])
            if now - alert.clear_since >= window:
                alert_resolve(alert=alert, rule=rule, resolution=f"clear for {rule.minutes} min", now=now)
                result.resolved.append(alert.pk)


def alerts_evaluate(now: datetime) -> EvaluationResult:
    """Evaluate every enabled rule at `now`: one alert per (rule, subject) while firing, resolved when clear."""
    result = EvaluationResult()
    inputs = _Inputs(now)
    for rule in list(AlertRule.objects.filter(enabled=True)):
        result.rules += 1
        try:
            findings = CONDITIONS[rule.kind](rule, inputs)
        except CircuitsUnavailable as exc:
            log.warning("alerts: rule %s (%s) skipped: %s; its alerts are left as they were", rule.pk, rule.name, exc)
            continue
        except Exception:  # one rule's failing input (a selector, Redis) must not stop the others
            log.exception("alerts: rule %s (%s) could not be evaluated", rule.pk, rule.name)
            continue
        applied = EvaluationResult()
        try:
            _apply(rule.pk, findings, now, applied)
        except Exception:  # nor one rule's failing write (its transaction is rolled back, its ids not reported)
            log.exception("alerts: the alerts of rule %s (%s) could not be updated", rule.pk, rule.name)
            continue
        result.opened += applied.opened
        result.updated += applied.updated
        result.resolved += applied.resolved
    return result
