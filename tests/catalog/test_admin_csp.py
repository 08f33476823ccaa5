"""The admin's provider list marks an undecryptable key with a class from its own stylesheet, never a style=
attribute (the Content-Security-Policy refuses inline styles)."""

import pytest

from catalog.models import Provider
from tests.catalog.test_stored_data_checks import _foreign_key
from tests.catalog.test_stored_data_checks import provider as provider  # the fixture

pytestmark = pytest.mark.django_db


def test_the_undecryptable_key_is_styled_by_a_class_and_the_admin_stylesheet(admin_client, provider):
    _foreign_key(provider)
    Provider.objects.create(name="keyless", base_url="http://127.0.0.1:9/v1", api_key="")

    page = admin_client.get("/admin/catalog/provider/").content.decode()

    assert '<strong class="cp-key-undecryptable">✖ Cannot be decrypted</strong>' in page
    assert "style=" not in page.split("<body")[1]
    assert 'href="/static/css/admin.css"' in page
