from django.urls import path

from health import api

api_urlpatterns = [
    path("circuits/", api.CircuitListApi.as_view(), name="api-circuit-list"),
    path("circuits/reset/", api.CircuitResetApi.as_view(), name="api-circuit-reset"),
    path("breaker-config/", api.BreakerConfigApi.as_view(), name="api-breaker-config"),
    # Model names may contain "/" (e.g. "meta/llama-3"), so the model is a path segment.
    path(
        "breaker-config/overrides/<str:provider>/<path:model>/",
        api.BreakerOverrideApi.as_view(),
        name="api-breaker-override",
    ),
]
