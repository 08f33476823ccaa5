from django.urls import path

from health import api

api_urlpatterns = [
    path("circuits/", api.CircuitListApi.as_view(), name="api-circuit-list"),
    path("circuits/reset/", api.CircuitResetApi.as_view(), name="api-circuit-reset"),
    path("circuits/force-open/", api.CircuitForceOpenApi.as_view(), name="api-circuit-force-open"),
    path("circuits/drain/", api.CircuitDrainApi.as_view(), name="api-circuit-drain"),
    path("circuits/release/", api.CircuitReleaseApi.as_view(), name="api-circuit-release"),
    # The model may contain "/" (e.g. "meta/llama-3"): everything between the provider and "/events/".
    path("circuits/<str:provider>/<path:model>/events/", api.CircuitEventListApi.as_view(), name="api-circuit-events"),
    path("breaker-config/", api.BreakerConfigApi.as_view(), name="api-breaker-config"),
    # Model names may contain "/" (e.g. "meta/llama-3"), so the model is a path segment.
    path(
        "breaker-config/overrides/<str:provider>/<path:model>/",
        api.BreakerOverrideApi.as_view(),
        name="api-breaker-override",
    ),
]
