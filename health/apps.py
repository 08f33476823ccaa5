from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"

    def ready(self) -> None:
        # The breaker engine reads its thresholds through this; it does not import the app itself.
        from health.breaker.factory import set_config_source
        from health.selectors import breaker_config_snapshot

        set_config_source(breaker_config_snapshot)

        # Holds and breaker overrides name their circuits as text: a rename carries them over, and a delete is
        # refused while they name the provider or model (as catalog refuses it while a chain does).
        from catalog import references
        from health.services import circuit_names_referencing, circuit_names_renamed

        references.register_name_user(
            kind="circuit_holds",
            label="Provider Health holds and overrides",
            order=42,
            rename=circuit_names_renamed,
            find=circuit_names_referencing,
        )
