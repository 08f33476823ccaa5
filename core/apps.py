from django.apps import AppConfig


class CoreConfig(AppConfig):
    """What every app uses: errors, validation, roles, API and admin bases, HTMX helpers, console tags."""

    name = "core"
    verbose_name = "Core"
