"""Sign-in forms that refuse a locked-out account or address before checking any password."""

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from access.client import client_address
from access.enums import ThrottleKind, ThrottleScope
from access.selectors import auth_locked_until
from access.services import auth_failure_record

# One message whether or not the account exists, and whatever the password: it reveals nothing.
LOCKED_MESSAGE = (
    "Too many failed sign-in attempts. Sign-in is paused for a while; try again later or ask an admin to unlock it."
)


class ThrottledLoginMixin:
    """AUTH_FAILURE_LIMIT failures within the window lock the username (existing or not) and the client address."""

    request: Any
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        username = (self.cleaned_data.get("username") or "")[:150]
        password = self.cleaned_data.get("password")
        if not username or not password or self.request is None:
            return super().clean()  # type: ignore[misc]  # a missing field is not a guess
        address = client_address(self.request)
        idents = [(ThrottleKind.ACCOUNT.value, username), (ThrottleKind.ADDRESS.value, address)]
        if auth_locked_until(scope=ThrottleScope.LOGIN, idents=idents):
            self._refuse()
        try:
            return super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            if auth_failure_record(scope=ThrottleScope.LOGIN, idents=idents, address=address):
                self._refuse()
            raise

    def _refuse(self) -> None:
        # The views answer 429 for this request.
        self.request.auth_locked = True
        raise forms.ValidationError(LOCKED_MESSAGE, code="locked")


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass
