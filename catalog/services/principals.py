"""Writes of teams, applications and agents: the targets gateway keys and scopes name."""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from audit.services import audit_record
from catalog.enums import ScopeType
from catalog.models import Agent, ApiKey, Application, Team
from catalog.references import scope_references
from catalog.services._shared import (
    audit_update,
    delete_checked,
    lock_named,
    lock_reference_first,
    lock_stored,
    name_checked,
    named,
    refuse_if_referenced,
    save_named,
)
from core.configbus import config_publish
from core.db import for_update, lock_rows
from core.types import Actor
from core.validation import FieldErrors


def _detached(obj: Team | Application | Agent) -> dict[str, list[str]]:
    """What deleting `obj` detaches (its foreign keys are SET_NULL): the applications of a team, the agents of an
    application, the gateway keys of any of them. Locked (after `obj`, in primary key order) so the list is what
    the delete changes; the delete's audit event records it, as the rows' own trail does not."""
    detached: dict[str, list[str]] = {}
    if isinstance(obj, Team):
        detached["applications"] = [a.name for a in for_update(obj.applications.order_by("pk"))]
    if isinstance(obj, Application):
        detached["agents"] = [a.name for a in for_update(obj.agents.order_by("pk"))]
    field = {Team: "team", Application: "application", Agent: "agent"}[type(obj)]
    keys = for_update(ApiKey.objects.filter(**{field: obj}).order_by("pk"))
    detached["api_keys"] = [str(key) for key in keys]
    return {kind: sorted(names) for kind, names in detached.items() if names}


def deletes_locks_first(model: type[Team] | type[Application] | type[Agent], pks: Iterable[int]) -> None:
    """Lock every row deleting these teams, applications or agents locks, in the one order: the rows, then what
    their deletes detach (a team's applications, an application's agents, then the keys of any), each table in
    primary key order. A batch of deletes (the admin's "delete selected") takes them all before its first
    delete's audit event takes the audit log's lock, which comes after every row's."""
    pks = list(pks)
    lock_rows(model.objects.filter(pk__in=pks))
    field = {Team: "team", Application: "application", Agent: "agent"}[model]
    if model is Team:
        lock_rows(Application.objects.filter(team__in=pks))
    if model is Application:
        lock_rows(Agent.objects.filter(application__in=pks))
    lock_rows(ApiKey.objects.filter(**{f"{field}__in": pks}))


def _scoped_target_delete[T: (Team, Application, Agent)](
    *,
    actor: Actor,
    obj: T,
    scope_type: str,
    object_type: str,
    label: str,
    snapshot: Callable[[T], dict[str, Any]],
) -> None:
    what = f"{label} “{obj.name}”"
    # Locked before the check: a chain, rule or guardrail scoped to it locks it too (catalog.scopes), so it either
    # committed before (the check sees it) or waits and finds the target gone.
    obj = lock_stored(obj, what=what)
    refuse_if_referenced(what, scope_references(scope_type=scope_type, scope_id=obj.pk))
    before = {**snapshot(obj), **_detached(obj)}
    pk = obj.pk
    delete_checked(obj, what=what)
    audit_record(
        actor=actor,
        action=f"{object_type}.delete",
        object_type=object_type,
        object_id=pk,
        object_repr=before["name"],
        before=before,
    )
    transaction.on_commit(config_publish)


# --- teams ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TeamInput:
    name: str


def _team_snapshot(team: Team) -> dict[str, Any]:
    return {"name": team.name}


def _team_validate(data: TeamInput, *, exclude_pk: int | None) -> str:
    errors = FieldErrors()
    taken = Team.objects.exclude(pk=exclude_pk) if exclude_pk else Team.objects.all()
    name = name_checked(errors, data.name, label="Team", max_length=128, taken=taken)
    errors.raise_if_any()
    return name


def team_validate(*, data: TeamInput, team: Team | None = None) -> None:
    """Raise ValidationFailed as team_create (or team_update of `team`) would; writes nothing."""
    _team_validate(data, exclude_pk=team.pk if team else None)


@transaction.atomic
def team_create(*, actor: Actor, data: TeamInput) -> Team:
    team = Team(name=_team_validate(data, exclude_pk=None))
    save_named(team, label="Team")
    audit_record(
        actor=actor,
        action="team.create",
        object_type="team",
        object_id=team.pk,
        object_repr=str(team),
        after=_team_snapshot(team),
    )
    transaction.on_commit(config_publish)
    return team


@transaction.atomic
def team_update(*, actor: Actor, team: Team, data: TeamInput) -> Team:
    name = _team_validate(data, exclude_pk=team.pk)
    before = _team_snapshot(team)
    team.name = name
    save_named(team, label="Team")
    audit_update(actor=actor, object_type="team", obj=team, before=before, after=_team_snapshot(team))
    transaction.on_commit(config_publish)
    return team


@transaction.atomic
def team_delete(*, actor: Actor, team: Team) -> None:
    """Delete a team no chain, routing rule or guardrail is scoped to; its applications and keys lose the team
    (the audit event names them)."""
    _scoped_target_delete(
        actor=actor,
        obj=team,
        scope_type=ScopeType.TEAM,
        object_type="team",
        label="Team",
        snapshot=_team_snapshot,
    )


# --- applications -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ApplicationInput:
    name: str
    team: str | None = None


def _application_snapshot(application: Application) -> dict[str, Any]:
    return {"name": application.name, "team": application.team.name if application.team else None}


def _application_validate(data: ApplicationInput, *, exclude_pk: int | None) -> dict[str, Any]:
    errors = FieldErrors()
    taken = Application.objects.exclude(pk=exclude_pk) if exclude_pk else Application.objects.all()
    name = name_checked(errors, data.name, label="Application", max_length=128, taken=taken)
    team = named(errors, "team", data.team, label="team", lookup=lambda n: lock_named(Team, n))
    errors.raise_if_any()
    return {"name": name, "team": team}


def application_validate(*, data: ApplicationInput, application: Application | None = None) -> None:
    """Raise ValidationFailed as application_create (or application_update of `application`) would; writes nothing."""
    _application_validate(data, exclude_pk=application.pk if application else None)


@transaction.atomic
def application_create(*, actor: Actor, data: ApplicationInput) -> Application:
    application = Application(**_application_validate(data, exclude_pk=None))
    save_named(application, label="Application")
    audit_record(
        actor=actor,
        action="application.create",
        object_type="application",
        object_id=application.pk,
        object_repr=str(application),
        after=_application_snapshot(application),
    )
    transaction.on_commit(config_publish)
    return application


def application_update_locks_first(data: Mapping[str, Any], stored: Application) -> None:
    """The lock application_update takes before the application's row: its team's (teams come first)."""
    lock_reference_first(Team, data, "team", stored.team_id)


@transaction.atomic
def application_update(*, actor: Actor, application: Application, data: ApplicationInput) -> Application:
    fields = _application_validate(data, exclude_pk=application.pk)
    before = _application_snapshot(application)
    for name, value in fields.items():
        setattr(application, name, value)
    save_named(application, label="Application")
    audit_update(
        actor=actor,
        object_type="application",
        obj=application,
        before=before,
        after=_application_snapshot(application),
    )
    transaction.on_commit(config_publish)
    return application


@transaction.atomic
def application_delete(*, actor: Actor, application: Application) -> None:
    """Delete an application no chain, routing rule or guardrail is scoped to."""
    _scoped_target_delete(
        actor=actor,
        obj=application,
        scope_type=ScopeType.APPLICATION,
        object_type="application",
        label="Application",
        snapshot=_application_snapshot,
    )


# --- agents -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentInput:
    name: str
    application: str | None = None


def _agent_snapshot(agent: Agent) -> dict[str, Any]:
    return {"name": agent.name, "application": agent.application.name if agent.application else None}


def _agent_validate(data: AgentInput, *, exclude_pk: int | None) -> dict[str, Any]:
    errors = FieldErrors()
    taken = Agent.objects.exclude(pk=exclude_pk) if exclude_pk else Agent.objects.all()
    name = name_checked(errors, data.name, label="Agent", max_length=128, taken=taken)
    application = named(
        errors,
        "application",
        data.application,
        label="application",
        lookup=lambda n: lock_named(Application, n),
    )
    errors.raise_if_any()
    return {"name": name, "application": application}


def agent_validate(*, data: AgentInput, agent: Agent | None = None) -> None:
    """Raise ValidationFailed as agent_create (or agent_update of `agent`) would; writes nothing."""
    _agent_validate(data, exclude_pk=agent.pk if agent else None)


@transaction.atomic
def agent_create(*, actor: Actor, data: AgentInput) -> Agent:
    agent = Agent(**_agent_validate(data, exclude_pk=None))
    save_named(agent, label="Agent")
    audit_record(
        actor=actor,
        action="agent.create",
        object_type="agent",
        object_id=agent.pk,
        object_repr=str(agent),
        after=_agent_snapshot(agent),
    )
    transaction.on_commit(config_publish)
    return agent


def agent_update_locks_first(data: Mapping[str, Any], stored: Agent) -> None:
    """The lock agent_update takes before the agent's row: its application's (applications come first)."""
    lock_reference_first(Application, data, "application", stored.application_id)


@transaction.atomic
def agent_update(*, actor: Actor, agent: Agent, data: AgentInput) -> Agent:
    fields = _agent_validate(data, exclude_pk=agent.pk)
    before = _agent_snapshot(agent)
    for name, value in fields.items():
        setattr(agent, name, value)
    save_named(agent, label="Agent")
    audit_update(actor=actor, object_type="agent", obj=agent, before=before, after=_agent_snapshot(agent))
    transaction.on_commit(config_publish)
    return agent


@transaction.atomic
def agent_delete(*, actor: Actor, agent: Agent) -> None:
    """Delete an agent no chain, routing rule or guardrail is scoped to."""
    _scoped_target_delete(
        actor=actor,
        obj=agent,
        scope_type=ScopeType.AGENT,
        object_type="agent",
        label="Agent",
        snapshot=_agent_snapshot,
    )
