"""Sign-in lockouts in the admin: listed, and unlocked by an admin (audited)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from access.forms import ThrottledAdminAuthenticationForm
from access.models import AuthThrottle
from access.services import auth_unlock_many

admin.site.login_form = ThrottledAdminAuthenticationForm


class LockedNowFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "locked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Locked now"), ("no", "Not locked")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(locked_until__gt=now)
        if self.value() == "no":
            return queryset.exclude(locked_until__gt=now)
        return queryset


@admin.register(AuthThrottle)
class AuthThrottleAdmin(admin.ModelAdmin):
    """Read-only list of the accounts and addresses with recent failures; "Unlock selected" ends a lockout (an
    account's together with the address the same attempt locked)."""

    list_display = ["value", "kind", "scope", "recent_failures", "locked_until", "locked_now", "updated_at"]
    list_filter = [LockedNowFilter, "scope", "kind"]
    search_fields = ["value"]
    ordering = ["-updated_at"]
    # Tuples, readonly first: django-stubs types the two lists differently, and a tuple fits both.
    readonly_fields = ("scope", "kind", "value", "recent_failures", "locked_until", "updated_at")
    fields = readonly_fields
    actions = ["unlock"]

    @admin.display(description="failures in the window")
    def recent_failures(self, obj: AuthThrottle) -> int:
        return len(obj.failures)

    @admin.display(boolean=True, description="locked now")
    def locked_now(self, obj: AuthThrottle) -> bool:
        return obj.locked_until is not None and obj.locked_until > timezone.now()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuthThrottle | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuthThrottle | None = None) -> bool:
        return False  # unlock instead: the unlock is audited

    def has_unlock_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("access.change_auththrottle")

    @admin.action(description="Unlock selected", permissions=["unlock"])
    def unlock(self, request: HttpRequest, queryset: Any) -> None:
        selected = list(queryset)
        unlocked = auth_unlock_many(actor=request.user, throttles=selected)  # every row locked first, in order
        chosen = {throttle.pk for throttle in selected}
        also = [str(row) for row in unlocked if row.pk not in chosen]
        message = f"Unlocked {len([row for row in unlocked if row.pk in chosen])} of {len(selected)} selected."
        if also:
            message += f" Also unlocked, locked by the same attempt: {', '.join(also)}."
        self.message_user(request, message)
