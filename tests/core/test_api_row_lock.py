"""core.api.row_locked_update: what an update view does before it takes the row's lock (see also
test_patch_concurrency.py, which races two writers on PostgreSQL)."""

import pytest
from django.db import connection
from rest_framework.parsers import JSONParser

from catalog.models import Provider
from tests.factories import ProviderFactory
from tests.helpers.api import patch_json

# No test-wide transaction: the view's own is the only one, so where it starts can be seen.
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_patch_body_is_read_before_the_row_is_locked(admin_client, monkeypatch):
    """Read inside the lock, a client that stopped sending its body halfway held the row for as long as it stalled."""
    provider = ProviderFactory(connect_timeout=5.0)
    in_transaction_while_parsing: list[bool] = []
    parse = JSONParser.parse

    def watched(self, *args, **kwargs):
        in_transaction_while_parsing.append(connection.in_atomic_block)
        return parse(self, *args, **kwargs)

    monkeypatch.setattr(JSONParser, "parse", watched)

    response = patch_json(admin_client, f"/api/providers/{provider.pk}/", {"connect_timeout": 3.0})

    assert response.status_code == 200, response.content
    assert in_transaction_while_parsing == [False]
    assert Provider.objects.get(pk=provider.pk).connect_timeout == 3.0


def test_a_malformed_patch_body_is_refused_without_touching_the_row(admin_client):
    provider = ProviderFactory(connect_timeout=5.0)

    response = admin_client.patch(f"/api/providers/{provider.pk}/", "{not json", content_type="application/json")

    assert response.status_code == 400
    assert "JSON" in response.json()["detail"]
    assert Provider.objects.get(pk=provider.pk).connect_timeout == 5.0
