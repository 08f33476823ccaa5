from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"

    def ready(self) -> None:
        # Rules name a provider or a model as text: a rename carries them over, a delete is refused while they do.
        from alerts.services import alert_rules_referencing, alert_rules_renamed
        from catalog import references

        references.register_name_user(
            kind="alert_rules",
            label="alert rules",
            order=44,
            rename=alert_rules_renamed,
            find=alert_rules_referencing,
        )
