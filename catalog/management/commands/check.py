"""Django's `check`, plus the checks that read stored rows (catalog.checks) when it is run plainly.

`manage.py check` and `check --tag stored_data` run them; `check --deploy` (and any other --tag) does
not, so a deploy check needs no database.
"""

from typing import Any

from django.core.management.commands.check import Command as DjangoCheckCommand

from catalog.checks import STORED_DATA, stored_data_checks


class Command(DjangoCheckCommand):
    # Any, not str: django-stubs declares the parent's labels as list[str] (they are str).
    def handle(self, *app_labels: Any, **options: Any) -> None:
        tags = options.get("tags") or []
        wanted = STORED_DATA in tags or (not tags and not options.get("deploy"))
        with stored_data_checks(wanted):
            super().handle(*app_labels, **options)
