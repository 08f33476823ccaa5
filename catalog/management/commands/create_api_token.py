from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.services import console_token_create
from core.errors import ApplicationError


class Command(BaseCommand):
    help = (
        "Issue a new REST API token for USERNAME and print its secret, and nothing else, for scripts. "
        "Only a hash is stored: the secret cannot be shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="script", help="What the token is for, shown in the admin.")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user = get_user_model()._default_manager.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}; create it first (manage.py createsuperuser).")
        try:
            _, secret = console_token_create(actor=None, user=user, name=name)
        except ApplicationError as exc:
            raise CommandError(exc.message)
        self.stdout.write(secret)
