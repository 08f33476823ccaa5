from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "Access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from access import checks  # noqa: F401  (registers the deploy check)
