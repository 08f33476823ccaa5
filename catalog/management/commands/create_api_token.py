from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print the API token of USERNAME (created on first use), and nothing else, for scripts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        user = get_user_model()._default_manager.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}; create it first (manage.py createsuperuser).")
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
