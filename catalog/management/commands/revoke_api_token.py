from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.models import ConsoleToken
from catalog.services import console_token_revoke


class Command(BaseCommand):
    help = "Revoke the REST API token whose prefix (cpt-…, listed in the admin) is PREFIX."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        token = ConsoleToken.objects.select_related("user").filter(prefix=prefix).first()
        if token is None:
            raise CommandError(f"No API token with prefix {prefix!r}.")
        if token.revoked_at is not None:
            self.stdout.write(f"API token {token.prefix} was already revoked at {token.revoked_at.isoformat()}.")
            return
        console_token_revoke(actor=None, token=token)
        self.stdout.write(f"Revoked API token {token.prefix} ({token.name}) of {token.user.get_username()}.")
