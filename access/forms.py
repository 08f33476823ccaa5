"""Sign-in forms that refuse a locked-out account or address before checking any password."""

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from access.client import client_address
from access.enums import ThrottleScope
from access.services import (
    auth_attempt_abandoned,
    auth_attempt_failed,
    auth_attempt_reserve,
    auth_attempt_succeeded,
    login_idents,
)

# One message whether or not the account exists, and whatever the password: it reveals nothing.
LOCKED_MESSAGE = (
    "Too many failed sign-in attempts. Sign-in is paused for a while; try again later or ask an admin to unlock it."
)


if TYPE_CHECKING:
    _LoginForm = AuthenticationForm  # what the mixin is mixed into, so mypy knows super().clean()
else:
    _LoginForm = object


class ThrottledLoginMixin(_LoginForm):
    """AUTH_FAILURE_LIMIT failures within the window lock the username (existing or not) and the client address."""

    request: Any
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        password = self.cleaned_data.get("password")
        if not username or not password or self.request is None:
            return super().clean()  # a missing field is not a guess
        address = client_address(self.request)
        # Reserved before the password is checked, so concurrent attempts cannot all pass a check made first.
        reservation = auth_attempt_reserve(
            scope=ThrottleScope.LOGIN, idents=login_idents(username=username, address=address), address=address
        )
        if reservation.refused:
            self._refuse()
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            if auth_attempt_failed(reservation=reservation):
                self._refuse()
            raise
        except BaseException:
            auth_attempt_abandoned(reservation=reservation)  # no answer was given: the attempt does not count
            raise
        auth_attempt_succeeded(reservation=reservation)
        return cleaned

    def _refuse(self) -> None:
        # The views answer 429 for this request.
        self.request.auth_locked = True
        raise forms.ValidationError(LOCKED_MESSAGE, code="locked")


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass
