from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.selectors import audit_verify_chain


class Command(BaseCommand):
    help = (
        "Check the audit log's hash chain and name the first broken event. Deleting the newest events leaves a "
        "valid chain: keep the head (--show-head) outside the database and pass it back as --anchor to catch that."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--anchor",
            default="",
            metavar="HASH",
            help="The hash of an event recorded earlier (--show-head): fail unless the log still holds it.",
        )
        parser.add_argument(
            "--show-head",
            action="store_true",
            help="Also print the newest event's id and hash, to anchor later checks.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        result = audit_verify_chain(anchor=options["anchor"].strip())
        if not result.intact:
            where = f" at event {result.broken_event_id}" if result.broken_event_id is not None else ""
            raise CommandError(f"Audit chain broken{where}: {result.reason}.")
        self.stdout.write(f"Audit chain intact: {result.checked} events verified.")
        if options["show_head"]:
            head = f"event {result.head_id}" if result.head_id is not None else "no events"
            self.stdout.write(f"Head: {head}, hash {result.head_hash}")
