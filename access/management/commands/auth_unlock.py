from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from access.models import AuthThrottle
from access.services import auth_unlock_many


class Command(BaseCommand):
    help = (
        "End the sign-in (and API token) lockouts of VALUE: a username as typed or a client address (an IPv6 "
        "client as its /64, as listed in the admin). Audited as auth.unlock. For when every admin is locked out."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("value", help="A username or a client address.")

    def handle(self, *args: Any, value: str, **options: Any) -> None:
        locked = list(AuthThrottle.objects.filter(value=value, locked_until__gt=timezone.now()).order_by("pk"))
        if not locked:
            raise CommandError(f"Nothing named {value!r} is locked out.")
        unlocked = auth_unlock_many(actor=None, throttles=locked)
        for row in unlocked:
            self.stdout.write(f"Unlocked {row}.")
