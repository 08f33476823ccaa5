from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"

    def ready(self) -> None:
        # The breaker engine reads its thresholds through this; it does not import the app itself.
        from health.breaker.factory import set_config_source
        from health.selectors import breaker_config_snapshot

        set_config_source(breaker_config_snapshot)
