"""The chain console form refuses control characters in names with a field error."""

from django.urls import reverse

from chains.models import FallbackChain
from core.validators import CONTROL_CHARACTERS_MESSAGE
from tests.chains.test_views import error_text, form_data


def test_console_chain_form_shows_the_field_error(admin_client, chain_catalog):
    response = admin_client.post(reverse("chains:create"), form_data(name="gpt-4o\r\nfallback"))

    assert response.status_code == 200
    assert error_text(response, "id_name") == [CONTROL_CHARACTERS_MESSAGE]
    assert not FallbackChain.objects.exists()


def test_console_chain_form_refuses_a_bidi_override(admin_client, chain_catalog):
    response = admin_client.post(reverse("chains:create"), form_data(name="gpt-4o \u202eniahc"))

    assert response.status_code == 200
    assert error_text(response, "id_name") == [CONTROL_CHARACTERS_MESSAGE]
    assert not FallbackChain.objects.exists()
