"""Filters that name a key, team or application by id: a value that only looks like a number is the field's
own error, never a 500 (str.isdigit() is true for "²", which int() refuses)."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("param", ["key", "team", "application"])
@pytest.mark.parametrize("value", ["\u00b2", "1\u00b2", "\u0663"])  # superscript two; Arabic-Indic three
def test_a_non_ascii_digit_in_an_id_filter_is_the_api_s_400(user_client, param, value):
    response = user_client.get("/api/request-logs/", {param: value})

    assert response.status_code == 400
    assert f"“{value}”" in response.json()["errors"][param][0]


@pytest.mark.parametrize(("url", "status"), [("/logs/", 200), ("/logs/export.csv", 400)])
def test_a_non_ascii_digit_in_an_id_filter_is_a_field_error_on_the_page_and_the_export(admin_client, url, status):
    response = admin_client.get(url, {"key": "1\u00b2"})

    assert response.status_code == status  # the page shows the field's error; the export refuses
    assert "Unknown gateway key “1²”" in response.content.decode()
