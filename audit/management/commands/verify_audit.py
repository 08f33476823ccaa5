from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.selectors import audit_verify_chain


class Command(BaseCommand):
    help = "Check the audit log's hash chain and name the first broken event."

    def handle(self, *args: Any, **options: Any) -> None:
        result = audit_verify_chain()
        if result.broken_event_id is not None:
            raise CommandError(f"Audit chain broken at event {result.broken_event_id}: {result.reason}.")
        self.stdout.write(f"Audit chain intact: {result.checked} events verified.")
