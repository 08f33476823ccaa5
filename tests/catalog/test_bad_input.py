"""The provider admin's change page with an id that only looks like a number."""

import pytest

pytestmark = pytest.mark.django_db


def test_a_provider_change_page_for_a_non_ascii_digit_id_is_not_a_500(admin_client):
    # "²" passes str.isdigit(); Django's admin redirects an id it cannot find to the list.
    response = admin_client.get("/admin/catalog/provider/%C2%B2/change/")

    assert response.status_code == 302
    assert response["Location"] == "/admin/"


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("application", '{"team": "\\ud800"}'),  # a lone surrogate: UTF-8 cannot encode it
        ("application", '{"team": "a\\u0000b"}'),  # PostgreSQL's text cannot hold a NUL
        ("provider", '{"deployments": {"\\ud800": "x"}}'),
        ("model", '{"name": "\\ud800"}'),
        ("alias", '{"name": "a\\u0000b"}'),
    ],
)
def test_a_patch_whose_body_names_what_cannot_be_looked_up_is_a_400_with_nothing_locked_or_saved(
    kind, body, admin_user, admin_client, catalog
):
    """The update locks the rows its body names before the edited row (docs/decisions.md, "One lock order"); it
    validates the body first, so a name the database cannot take is the serializer's 400, not a 500 from the
    lookup."""
    from catalog.services import ApplicationInput, TeamInput, application_create, team_create
    from routing.services import AliasInput, alias_create

    team_create(actor=admin_user, data=TeamInput(name="payments"))
    pk = {
        "application": lambda: (
            application_create(actor=admin_user, data=ApplicationInput(name="checkout", team="payments")).pk
        ),
        "provider": lambda: catalog["openai"].pk,
        "model": lambda: catalog["gpt-4o"].pk,
        "alias": lambda: alias_create(actor=admin_user, data=AliasInput(name="fast", model="gpt-4o")).pk,
    }[kind]()
    path = {"application": "applications", "provider": "providers", "model": "models", "alias": "aliases"}[kind]

    response = admin_client.generic("PATCH", f"/api/{path}/{pk}/", body, content_type="application/json")

    assert response.status_code == 400, response.content[:300]
    assert response.json()["errors"]
