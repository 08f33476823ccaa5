from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "catalog"
    verbose_name = "Catalog"

    def ready(self) -> None:
        from django.core.checks import register

        from catalog.checks import STORED_DATA, check_secrets_decrypt, check_stored_names

        # Tagged, and inert unless asked for (catalog.checks.stored_data_checks): they read the database.
        register(check_secrets_decrypt, STORED_DATA)
        register(check_stored_names, STORED_DATA)

        from catalog import references
        from catalog.selectors import providers_deploying

        # An Azure provider's deployments name models: deleting one would leave a key that routes nowhere.
        references.register_model_referrer(
            kind="provider_deployments",
            label="the deployments of providers",
            order=50,
            find=lambda *, model: [p.name for p in providers_deploying(model_name=model.name)],
        )
