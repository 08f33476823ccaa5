"""Roles are Django groups: admin, bi_read_only, user."""

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


class Role(StrEnum):
    ADMIN = "admin"
    BI_READ_ONLY = "bi_read_only"
    USER = "user"


ROLE_LABELS = {Role.ADMIN: "Admin", Role.BI_READ_ONLY: "BI read-only", Role.USER: "User"}


def user_roles(user: AbstractBaseUser | AnonymousUser) -> frozenset[str]:
    """Role names of a user, cached on the instance for the request."""
    if not user.is_authenticated:
        return frozenset()
    cached: frozenset[str] | None = getattr(user, "_cp_roles", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]  # auth.User has groups
        if getattr(user, "is_superuser", False):
            names.add(Role.ADMIN)  # a superuser can do everything an admin can
        cached = frozenset(names)
        # Cached on the instance: a request asks several times (menu, view, template).
        setattr(user, "_cp_roles", cached)  # noqa: B010
    return cached


def has_role(user: AbstractBaseUser | AnonymousUser, *roles: Role) -> bool:
    return bool(user_roles(user) & {str(r) for r in roles})


def primary_role(user: AbstractBaseUser | AnonymousUser) -> Role | None:
    names = user_roles(user)
    for role in (Role.ADMIN, Role.BI_READ_ONLY, Role.USER):
        if role in names:
            return role
    return None
