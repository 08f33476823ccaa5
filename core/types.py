"""Types every app's signatures share."""

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

# Who makes a change: the signed-in user, or None (and AnonymousUser) for the system itself (a management
# command, a periodic job). The audit log records the user's name, or "system".
Actor = AbstractBaseUser | AnonymousUser | None
