"""Sign-in views: Django's, with throttled forms; a refused (locked-out) attempt answers 429."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from access.forms import ThrottledAuthenticationForm


def _locked_is_429(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        if getattr(request, "auth_locked", False):
            response.status_code = 429
        return response

    return wrapped


login = _locked_is_429(
    auth_views.LoginView.as_view(template_name="auth/login.html", authentication_form=ThrottledAuthenticationForm)
)


@_locked_is_429
def admin_login(request: HttpRequest) -> HttpResponse:
    """The admin's own login view; its form is the throttled one (access.admin sets admin.site.login_form)."""
    return admin.site.login(request)
