from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"

    def ready(self) -> None:
        from catalog import references
        from routing import selectors

        # Catalog refuses to delete what rules, guardrails and aliases still name, without reading their tables.
        references.register_model_referrer(
            kind="routing_rules", label="routing rules", order=20, find=selectors.routing_rules_referencing_model
        )
        references.register_model_referrer(
            kind="guardrails", label="guardrails", order=30, find=selectors.guardrails_referencing_model
        )
        references.register_model_referrer(
            kind="aliases", label="aliases", order=40, find=selectors.aliases_referencing_model
        )
        references.register_scope_referrer(
            kind="routing_rules", label="routing rules", order=20, find=selectors.routing_rules_referencing_scope
        )
        references.register_scope_referrer(
            kind="guardrails", label="guardrails", order=30, find=selectors.guardrails_referencing_scope
        )
        references.register_model_name_claim(kind="aliases", what="an alias", claims=selectors.alias_name_taken)
