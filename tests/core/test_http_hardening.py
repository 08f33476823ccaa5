"""HTTP hardening of the console and its API: the security headers every answer carries, and error pages that
render without the database and never show a traceback."""

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path


def _explode(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("internal detail: postgres://controlplane:hunter2@db/cp")


# ROOT_URLCONF of the 500 test: the console's own URLs and handlers, plus one view that raises.
urlpatterns = [path("explode/", _explode)]
handler404 = "core.views.not_found"


def _assert_hardened(response: HttpResponse) -> None:
    csp = response["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
    assert directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'"
    assert directives["base-uri"] == "'none'"
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


@pytest.mark.django_db
def test_console_pages_api_answers_and_errors_carry_the_security_headers(admin_client):
    answers = {
        "login": Client().get("/login/"),
        "dashboard": admin_client.get("/"),
        "api": admin_client.get("/api/providers/"),
        "api 401": Client().get("/api/providers/"),
        "not found": admin_client.get("/no/such/page/"),
        "admin": admin_client.get("/admin/"),
    }

    for name, response in answers.items():
        assert response.status_code in (200, 401, 404), name
        _assert_hardened(response)


def test_404_page_renders_without_the_database(client):
    """No django_db mark: any query raises, and the 404 would become the 500 fallback."""
    response = client.get("/no/such/page/")

    assert response.status_code == 404
    assert b"There is nothing at this address." in response.content
    _assert_hardened(response)


@override_settings(ROOT_URLCONF=__name__, DEBUG=False)
def test_500_page_renders_without_the_database_and_shows_no_traceback():
    """No django_db mark: the 500 page must not query (the usual cause of a 500 is the database being down)."""
    response = Client(raise_request_exception=False).get("/explode/")

    assert response.status_code == 500
    body = response.content.decode()
    assert "Server Error" in body
    for leak in ("Traceback", "RuntimeError", "hunter2", "internal detail", "explode"):
        assert leak not in body


def test_the_page_query_of_a_header_with_too_many_fields_is_empty(settings):
    """A bad HX-Current-URL must not fail a change already made: one with more parameters than
    DATA_UPLOAD_MAX_NUMBER_FIELDS raised TooManyFieldsSent (a 400 after a committed circuit reset)."""
    from types import SimpleNamespace

    from core.htmx import current_url_query

    many = "&".join(f"k{i}=v" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    request = SimpleNamespace(htmx=SimpleNamespace(current_url=f"http://testserver/fallback/health/?{many}"))

    assert current_url_query(request) == {}
