"""Who still uses a catalog row: a registry the apps above catalog fill in, so catalog never reads their tables.

Catalog sits below routing and chains, yet it must refuse to delete a provider, a model or a scope target
(team, application, agent, user, key) that their rows still name, and refuse a model name an alias already
has. Each of those apps registers its finders in its AppConfig.ready(); catalog's services ask here. Apps
whose rows name a provider or a model as text (holds, breaker overrides, alert rules) register a rename too,
which carries those rows over to the new name in the rename's transaction.

`order` places a kind in the 409's message and `errors` dict whatever order the apps load in (chains 10,
routing rules 20, guardrails 30, aliases 40; catalog's own "models" come last). Registering a kind again
replaces it, so a second ready() does not double it.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from catalog.models import LlmModel, Provider
from core import db
from core.types import Actor


class ProviderFinder(Protocol):
    def __call__(self, *, provider: Provider) -> list[str]: ...


class ModelFinder(Protocol):
    def __call__(self, *, model: LlmModel) -> list[str]: ...


class ScopeFinder(Protocol):
    def __call__(self, *, scope_type: str, scope_id: int) -> list[str]: ...


class NameClaim(Protocol):
    def __call__(self, *, name: str) -> bool: ...


class ProviderMove(Protocol):
    def __call__(self, *, model: LlmModel, provider: Provider) -> list[str]: ...


class Rename(Protocol):
    def __call__(self, *, actor: Actor, old: str, new: str) -> Callable[[], None]: ...


@dataclass(frozen=True)
class _Referrer[F]:
    kind: str  # key in the ConflictError's errors, e.g. "routing_rules"
    order: int
    find: F


@dataclass(frozen=True)
class _Claim:
    what: str  # e.g. "an alias", as in "“fast” is already an alias"
    claims: NameClaim


_provider_referrers: dict[str, _Referrer[ProviderFinder]] = {}
_model_referrers: dict[str, _Referrer[ModelFinder]] = {}
_scope_referrers: dict[str, _Referrer[ScopeFinder]] = {}
_model_name_claims: dict[str, _Claim] = {}
_provider_moves: dict[str, ProviderMove] = {}
_provider_renames: dict[str, Rename] = {}
_model_renames: dict[str, Rename] = {}
_labels: dict[str, str] = {}


def register_provider_referrer(*, kind: str, label: str, order: int, find: ProviderFinder) -> None:
    """`find(provider=...)` names the rows of `kind` that use the provider."""
    _provider_referrers[kind] = _Referrer(kind, order, find)
    _labels[kind] = label


def register_model_referrer(*, kind: str, label: str, order: int, find: ModelFinder) -> None:
    """`find(model=...)` names the rows of `kind` that use the model."""
    _model_referrers[kind] = _Referrer(kind, order, find)
    _labels[kind] = label


def register_scope_referrer(*, kind: str, label: str, order: int, find: ScopeFinder) -> None:
    """`find(scope_type=..., scope_id=...)` names the rows of `kind` scoped to that target."""
    _scope_referrers[kind] = _Referrer(kind, order, find)
    _labels[kind] = label


def register_model_name_claim(*, kind: str, what: str, claims: NameClaim) -> None:
    """`claims(name=...)` is True when a row of `kind` has that name, which a model then cannot take."""
    _model_name_claims[kind] = _Claim(what, claims)


def register_provider_move_check(*, kind: str, check: ProviderMove) -> None:
    """`check(model=..., provider=...)` says, one sentence per row of `kind`, what serving `model` by default
    through `provider` would break (a chain entry that would be its own source, say); [] when nothing."""
    _provider_moves[kind] = check


def register_provider_rename(*, kind: str, rename: Rename) -> None:
    """`rename(actor=..., old=..., new=...)` carries the rows of `kind` that name a provider as text over to its
    new name, inside the rename's transaction, in two steps: the call locks the rows and checks them (it may
    refuse with a ConflictError, which rolls the rename back), and the function it returns moves and audits them.
    Every app's rows are locked before any of them writes an audit event, which takes the audit log's lock: the
    order every service keeps (rows, then the audit log), so a rename cannot deadlock with another write."""
    _provider_renames[kind] = rename


def register_model_rename(*, kind: str, rename: Rename) -> None:
    """As register_provider_rename, for a model's name."""
    _model_renames[kind] = rename


class FieldRename(Protocol):
    def __call__(self, *, actor: Actor, field: str, old: str, new: str) -> Callable[[], None]: ...


class NameUse(Protocol):
    def __call__(self, *, field: str, name: str) -> list[str]: ...


def register_name_user(*, kind: str, label: str, order: int, rename: FieldRename, find: NameUse) -> None:
    """For rows that name providers and models as text: a rename of either carries them over
    (`rename(field="provider" | "model", ...)`), and a delete is refused while `find(field=..., name=...)` names
    any of them."""
    register_provider_rename(kind=kind, rename=partial(rename, field="provider"))
    register_model_rename(kind=kind, rename=partial(rename, field="model"))
    register_provider_referrer(
        kind=kind, label=label, order=order, find=lambda *, provider: find(field="provider", name=provider.name)
    )
    register_model_referrer(
        kind=kind, label=label, order=order, find=lambda *, model: find(field="model", name=model.name)
    )


def provider_renamed(*, actor: Actor, old: str, new: str) -> None:
    """Carry every registered app's rows over to a provider's new name: all locked first, then all moved."""
    _renamed(_provider_renames, actor=actor, old=old, new=new)


def model_renamed(*, actor: Actor, old: str, new: str) -> None:
    """As provider_renamed, for a model's new name."""
    _renamed(_model_renames, actor=actor, old=old, new=new)


def _renamed(renames: dict[str, Rename], *, actor: Actor, old: str, new: str) -> None:
    moves = [renames[kind](actor=actor, old=old, new=new) for kind in sorted(renames)]
    for move in moves:
        move()


def _found[F](referrers: dict[str, _Referrer[F]], ask: Callable[[F], list[str]]) -> dict[str, list[str]]:
    refs: dict[str, list[str]] = {}
    for referrer in sorted(referrers.values(), key=lambda r: (r.order, r.kind)):
        if names := ask(referrer.find):
            refs[referrer.kind] = names
    return refs


def provider_references(*, provider: Provider) -> dict[str, list[str]]:
    """Kind → names of the registered rows that use `provider`, by `order`."""
    return _found(_provider_referrers, lambda find: find(provider=provider))


def model_references(*, model: LlmModel) -> dict[str, list[str]]:
    """Kind → names of the registered rows that use `model`, by `order`."""
    return _found(_model_referrers, lambda find: find(model=model))


def scope_references(*, scope_type: str, scope_id: int) -> dict[str, list[str]]:
    """Kind → names of the registered rows scoped to one target.

    Scopes store a bare target id (no foreign key), so deleting a target they name would leave them dangling.
    """
    return _found(_scope_referrers, lambda find: find(scope_type=scope_type, scope_id=scope_id))


def provider_move_problems(*, model: LlmModel, provider: Provider) -> list[str]:
    """What the registered apps say moving `model`'s default provider to `provider` would break."""
    return [
        problem for kind in sorted(_provider_moves) for problem in _provider_moves[kind](model=model, provider=provider)
    ]


def model_name_claimed_as(*, name: str) -> str | None:
    """What already has this name (e.g. "an alias"), or None when a model may take it."""
    for claim in _model_name_claims.values():
        if claim.claims(name=name):
            return claim.what
    return None


def model_name_lock(*, name: str) -> None:
    """Lock a name a model or an alias is about to take, until the transaction ends: both writers take it before
    they check the other table (no constraint spans the two), so two of them cannot both pass. Called before any
    row lock of the write."""
    if cleaned := (name or "").strip():
        db.advisory_lock(f"name:{cleaned}")


def model_name_lock_first(data: Mapping[str, Any], stored: Any) -> None:
    """The lock a model's or an alias's update takes before the edited row: that of the name its body gives it,
    or of the stored `name` when the body leaves it out (see `core.api.row_locked_update`)."""
    name = data.get("name", stored.name)
    model_name_lock(name=name if isinstance(name, str) else "")


def reference_label(kind: str) -> str:
    """How a kind reads in a message ("routing_rules" → "routing rules"); unknown kinds read as themselves."""
    return _labels.get(kind, kind)
