"""core.db.distinct_values: a column's distinct values walked off its index, the same list SELECT DISTINCT gives."""

import pytest
from django.db import transaction

from audit.models import AuditEvent
from audit.selectors import audit_filter_options
from audit.services import audit_record
from core.db import distinct_values

pytestmark = pytest.mark.django_db


def test_an_empty_table_has_no_values():
    assert distinct_values(AuditEvent, "action") == []
    assert audit_filter_options() == {"actors": [], "actions": [], "object_types": []}


def test_the_values_are_those_of_select_distinct_in_its_order(admin_user):
    actions = ["chain.update", "auth.lockout", "chain.update", "Zeta.action", "éclair.set", "chain.update", "a"]
    with transaction.atomic():
        for n, action in enumerate(actions):
            audit_record(actor=admin_user if n % 2 else None, action=action, object_type="thing", object_id=n)

    def distinct(field: str) -> list[str]:
        return list(AuditEvent.objects.order_by(field).values_list(field, flat=True).distinct())

    assert len(distinct("action")) == 5
    assert distinct_values(AuditEvent, "action") == distinct("action")
    assert distinct_values(AuditEvent, "object_type") == ["thing"]
    assert len(distinct("actor_name")) == 2
    assert audit_filter_options() == {
        "actors": distinct("actor_name"),
        "actions": distinct("action"),
        "object_types": ["thing"],
    }
