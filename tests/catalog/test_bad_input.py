"""The provider admin's change page with an id that only looks like a number."""

import pytest

pytestmark = pytest.mark.django_db


def test_a_provider_change_page_for_a_non_ascii_digit_id_is_not_a_500(admin_client):
    # "²" passes str.isdigit(); Django's admin redirects an id it cannot find to the list.
    response = admin_client.get("/admin/catalog/provider/%C2%B2/change/")

    assert response.status_code == 302
    assert response["Location"] == "/admin/"
