from django.apps import AppConfig


class ChainsConfig(AppConfig):
    name = "chains"

    def ready(self) -> None:
        from catalog import references
        from chains import selectors

        # Catalog refuses to delete what chains still name, without reading their tables.
        references.register_provider_referrer(
            kind="chains", label="chains", order=10, find=selectors.chains_referencing_provider
        )
        references.register_model_referrer(
            kind="chains", label="chains", order=10, find=selectors.chains_referencing_model
        )
        references.register_scope_referrer(
            kind="chains", label="chains", order=10, find=selectors.chains_referencing_scope
        )
        references.register_provider_move_check(kind="chains", check=selectors.chains_broken_by_provider_move)
