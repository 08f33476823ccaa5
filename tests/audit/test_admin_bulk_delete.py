"""Bulk "Delete selected" in the admin: one transaction, one audit event per object."""

import pytest

from audit.models import AuditEvent
from routing.models import Alias
from tests.factories import AliasFactory, LlmModelFactory

# Django's delete_selected action runs outside a transaction; only a transactional test sees that.
pytestmark = pytest.mark.django_db(transaction=True)


def test_admin_bulk_delete_deletes_and_audits_every_object(admin_client):
    model = LlmModelFactory(name="gpt-4o")
    first = AliasFactory(name="fast", model=model)
    second = AliasFactory(name="smart", model=model)

    response = admin_client.post(
        "/admin/routing/alias/",
        {"action": "delete_selected", "_selected_action": [first.pk, second.pk], "post": "yes"},
    )

    assert response.status_code == 302
    assert Alias.objects.count() == 0
    events = AuditEvent.objects.order_by("id")
    assert [(e.action, e.object_repr) for e in events] == [
        ("alias.delete", "fast"),
        ("alias.delete", "smart"),
    ]
