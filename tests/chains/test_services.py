import pytest
from django.db import connection

from audit.models import AuditEvent
from catalog.enums import ScopeType
from chains.models import ChainEntry, FallbackChain
from chains.services import ChainInput, EntryInput, chain_create, chain_delete, chain_set_enabled, chain_update
from core.errors import ConflictError, ValidationFailed
from tests.factories import LlmModelFactory, ProviderFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def chain_models():
    return {
        "src": LlmModelFactory(name="gpt-4o"),
        "a": LlmModelFactory(name="claude-sonnet"),
        "b": LlmModelFactory(name="gemini-pro"),
    }


def make_input(**overrides) -> ChainInput:
    base = dict(
        name="Primary fallback",
        source_model="gpt-4o",
        entries=[EntryInput("claude-sonnet"), EntryInput("gemini-pro")],
        scope_type=ScopeType.GLOBAL,
        scope_id=None,
        enabled=True,
    )
    base.update(overrides)
    return ChainInput(**base)


def test_chain_create_writes_entries_in_order_and_audits(chain_models, admin_user):
    chain = chain_create(actor=admin_user, data=make_input())

    assert [e.model.name for e in chain.entries.all()] == ["claude-sonnet", "gemini-pro"]
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_name, event.object_id) == ("chain.create", "alice", str(chain.pk))
    assert event.after == {
        "name": "Primary fallback",
        "source_model": "gpt-4o",
        "entries": [{"model": "claude-sonnet", "provider": None}, {"model": "gemini-pro", "provider": None}],
        "scope": {"type": "global", "id": None},
        "enabled": True,
        "resilience": {"enabled": False},
    }


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "   "}, "name"),
        ({"name": ""}, "name"),
        ({"source_model": "  "}, "source_model"),
        ({"source_model": "nope"}, "source_model"),
        ({"entries": []}, "entries"),
        ({"entries": [EntryInput(" ")]}, "entries.0.model"),
        ({"entries": [EntryInput("claude-sonnet"), EntryInput("claude-sonnet")]}, "entries.1.model"),
        ({"entries": [EntryInput("gpt-4o")]}, "entries.0.model"),
        ({"entries": [EntryInput("claude-sonnet", "no-such-provider")]}, "entries.0.provider"),
        ({"scope_type": "team", "scope_id": 999999}, "scope"),
        ({"scope_type": "team", "scope_id": None}, "scope"),
        ({"scope_type": "galaxy"}, "scope"),
    ],
)
def test_chain_create_refuses_invalid_input_and_saves_nothing(chain_models, admin_user, overrides, field):
    with pytest.raises(ValidationFailed) as exc:
        chain_create(actor=admin_user, data=make_input(**overrides))

    assert field in exc.value.errors
    assert FallbackChain.objects.count() == 0
    assert ChainEntry.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_chain_create_refuses_more_than_ten_entries(admin_user):
    LlmModelFactory(name="gpt-4o")
    names = [LlmModelFactory().name for _ in range(11)]

    with pytest.raises(ValidationFailed) as exc:
        chain_create(actor=admin_user, data=make_input(entries=[EntryInput(n) for n in names]))

    assert exc.value.errors["entries"] == ["A chain has at most 10 entries (got 11)."]


def test_chain_create_allows_source_model_via_another_provider(chain_models, admin_user):
    azure = ProviderFactory(name="azure")

    chain = chain_create(actor=admin_user, data=make_input(entries=[EntryInput("gpt-4o", "azure")]))

    assert [(e.model.name, e.provider) for e in chain.entries.all()] == [("gpt-4o", azure)]


def test_chain_create_refuses_second_chain_for_same_source_and_scope(chain_models, admin_user):
    chain_create(actor=admin_user, data=make_input())

    with pytest.raises(ValidationFailed) as exc:
        chain_create(actor=admin_user, data=make_input(name="Other"))

    assert "source_model" in exc.value.errors
    assert FallbackChain.objects.count() == 1


def test_chain_create_same_source_in_other_scope_is_allowed(chain_models, admin_user):
    team = TeamFactory()
    chain_create(actor=admin_user, data=make_input())

    chain = chain_create(actor=admin_user, data=make_input(name="Team", scope_type="team", scope_id=team.pk))

    assert (chain.scope_type, chain.scope_id) == ("team", team.pk)


def test_chain_update_with_stale_version_is_refused(chain_models, admin_user):
    chain = chain_create(actor=admin_user, data=make_input())
    chain_update(actor=admin_user, chain_id=chain.pk, version=1, data=make_input(name="Renamed"))

    with pytest.raises(ConflictError) as exc:
        chain_update(actor=admin_user, chain_id=chain.pk, version=1, data=make_input(name="Lost update"))

    chain.refresh_from_db()
    assert chain.name == "Renamed"
    assert chain.version == 2
    assert "changed by someone else" in exc.value.message


def test_chain_update_audits_only_changed_fields(chain_models, admin_user):
    chain = chain_create(actor=admin_user, data=make_input())

    chain_update(
        actor=admin_user,
        chain_id=chain.pk,
        version=1,
        data=make_input(entries=[EntryInput("gemini-pro"), EntryInput("claude-sonnet")]),
    )

    event = AuditEvent.objects.order_by("-id").first()
    assert event.action == "chain.update"
    assert event.before == {
        "entries": [{"model": "claude-sonnet", "provider": None}, {"model": "gemini-pro", "provider": None}]
    }
    assert event.after == {
        "entries": [{"model": "gemini-pro", "provider": None}, {"model": "claude-sonnet", "provider": None}]
    }


def test_chain_update_that_changes_nothing_keeps_the_version(
    chain_models, admin_user, django_capture_on_commit_callbacks
):
    chain = chain_create(actor=admin_user, data=make_input())

    with django_capture_on_commit_callbacks() as callbacks:
        updated = chain_update(
            actor=admin_user, chain_id=chain.pk, version=1, data=make_input(name=" Primary fallback ")
        )

    chain.refresh_from_db()
    assert (updated.version, chain.version) == (1, 1)
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["chain.create"]
    assert callbacks == []


def test_chain_update_after_a_no_op_accepts_the_same_version(chain_models, admin_user):
    chain = chain_create(actor=admin_user, data=make_input())
    chain_update(actor=admin_user, chain_id=chain.pk, version=1, data=make_input())

    updated = chain_update(actor=admin_user, chain_id=chain.pk, version=1, data=make_input(enabled=False))

    assert (updated.version, updated.enabled) == (2, False)
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == ["chain.create", "chain.update"]


def test_chain_update_invalid_leaves_chain_untouched(chain_models, admin_user):
    chain = chain_create(actor=admin_user, data=make_input())

    with pytest.raises(ValidationFailed):
        chain_update(actor=admin_user, chain_id=chain.pk, version=1, data=make_input(entries=[EntryInput("nope")]))

    chain.refresh_from_db()
    assert chain.version == 1
    assert [e.model.name for e in chain.entries.all()] == ["claude-sonnet", "gemini-pro"]
    assert AuditEvent.objects.count() == 1


def test_chain_toggle_and_delete_are_audited(chain_models, admin_user):
    chain = chain_create(actor=admin_user, data=make_input())

    chain_set_enabled(actor=admin_user, chain_id=chain.pk, enabled=False)
    chain_delete(actor=admin_user, chain_id=chain.pk)

    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["chain.create", "chain.disable", "chain.delete"]
    deleted = AuditEvent.objects.order_by("-id").first()
    assert deleted.before["entries"] == [
        {"model": "claude-sonnet", "provider": None},
        {"model": "gemini-pro", "provider": None},
    ]
    assert FallbackChain.objects.count() == 0
    assert ChainEntry.objects.count() == 0


def test_database_vendor_matches_environment():
    import os

    expected = "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
    assert connection.vendor == expected
