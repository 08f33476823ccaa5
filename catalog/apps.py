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
