from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "catalog"
    verbose_name = "Catalog"

    def ready(self) -> None:
        from django.core.checks import register

        from catalog.checks import check_secrets_decrypt

        register(check_secrets_decrypt)
