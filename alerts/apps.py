from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"

    def ready(self) -> None:
        # Rules name a provider or a model as text: a rename carries them over, a delete is refused while they do.
        from functools import partial

        from alerts.services import alert_rules_referencing, alert_rules_renamed
        from catalog import references

        references.register_provider_rename(kind="alert_rules", rename=partial(alert_rules_renamed, field="provider"))
        references.register_model_rename(kind="alert_rules", rename=partial(alert_rules_renamed, field="model"))
        references.register_provider_referrer(
            kind="alert_rules",
            label="alert rules",
            order=44,
            find=lambda *, provider: alert_rules_referencing(field="provider", name=provider.name),
        )
        references.register_model_referrer(
            kind="alert_rules",
            label="alert rules",
            order=44,
            find=lambda *, model: alert_rules_referencing(field="model", name=model.name),
        )
