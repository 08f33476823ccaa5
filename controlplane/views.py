from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.roles import Role, has_role


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send each role to the first page it can use."""
    if has_role(request.user, Role.ADMIN):
        return redirect("chains:list")
    if has_role(request.user, Role.BI_READ_ONLY, Role.USER):
        return redirect("requestlogs:list")
    return render(request, "home.html")
