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
        from functools import partial

        from catalog import references
        from health.services import circuit_names_referencing, circuit_names_renamed

        references.register_provider_rename(kind="breaker", rename=partial(circuit_names_renamed, field="provider"))
        references.register_model_rename(kind="breaker", rename=partial(circuit_names_renamed, field="model"))
        references.register_provider_referrer(
            kind="circuit_holds",
            label="Provider Health holds and overrides",
            order=42,
            find=lambda *, provider: circuit_names_referencing(field="provider", name=provider.name),
        )
        references.register_model_referrer(
            kind="circuit_holds",
            label="Provider Health holds and overrides",
            order=42,
            find=lambda *, model: circuit_names_referencing(field="model", name=model.name),
        )
