"""Filters that name a key, team or application by id: a value that only looks like a number is the field's
own error, never a 500 (str.isdigit() is true for "²", which int() refuses)."""

import re

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


@pytest.mark.parametrize(
    ("param", "input_id", "value"),
    [
        ("requested_model", "log-requested", "m" * 129),
        ("served_model", "log-served-model", "m" * 129),
        ("provider", "log-provider", "p" * 65),
        ("range", "log-range", "2y"),
    ],
)
def test_a_filter_s_error_is_tied_to_its_input(admin_client, param, input_id, value):
    # A screen reader announces the error with the field: aria-invalid and aria-describedby name it.
    html = admin_client.get("/logs/", {param: value}).content.decode()

    tag = re.search(rf'<(?:input|select) [^>]*id="{input_id}"[^>]*>', html).group(0)
    assert 'aria-invalid="true"' in tag and f'aria-describedby="{input_id}-error"' in tag
    assert re.search(rf'<p class="error" id="{input_id}-error">[^<]+</p>', html)


def test_the_model_filters_say_any_model_when_empty(admin_client):
    html = admin_client.get("/logs/").content.decode()

    for input_id in ("log-requested", "log-served-model"):
        tag = re.search(rf'<input [^>]*id="{input_id}"[^>]*>', html).group(0)
        assert 'placeholder="Any model"' in tag and "aria-invalid" not in tag
