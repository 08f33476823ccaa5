from django.apps import AppConfig


class RequestlogsConfig(AppConfig):
    name = "requestlogs"

    def ready(self) -> None:
        from health.stats import register_circuit_stats
        from requestlogs.aggregates import attempt_stats

        # Provider Health's error share and p50 per circuit come from the attempt aggregates.
        register_circuit_stats(attempt_stats)
