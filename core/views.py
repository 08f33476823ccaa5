from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound
from django.shortcuts import redirect, render
from django.template import loader

from core.roles import Role, has_role


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The start page of a role without the Dashboard (admin and bi_read_only land on it at `/`): a user goes
    to Request Logs; an account without a role sees what to ask for."""
    if has_role(request.user, Role.USER):
        return redirect("requestlogs:list")
    return render(request, "home.html")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404 page: the view's own words when it raised Http404("..."), a plain sentence otherwise."""
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    html = loader.render_to_string("404.html", {"message": message or "There is nothing at this address."}, request)
    return HttpResponseNotFound(html)
