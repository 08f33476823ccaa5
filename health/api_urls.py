from django.urls import path, register_converter

from core.converters import NameConverter, NamePathConverter
from health import api

register_converter(NameConverter, "name")
register_converter(NamePathConverter, "namepath")

api_urlpatterns = [
    path("circuits/", api.CircuitListApi.as_view(), name="api-circuit-list"),
    path("circuits/reset/", api.CircuitResetApi.as_view(), name="api-circuit-reset"),
    path("circuits/force-open/", api.CircuitForceOpenApi.as_view(), name="api-circuit-force-open"),
    path("circuits/drain/", api.CircuitDrainApi.as_view(), name="api-circuit-drain"),
    path("circuits/release/", api.CircuitReleaseApi.as_view(), name="api-circuit-release"),
    # The model may contain "/" (e.g. "meta/llama-3"): everything between the provider and "/events/". Neither
    # name holds a control character (core/converters.py).
    path(
        "circuits/<name:provider>/<namepath:model>/events/",
        api.CircuitEventListApi.as_view(),
        name="api-circuit-events",
    ),
    path("breaker-config/", api.BreakerConfigApi.as_view(), name="api-breaker-config"),
    # Model names may contain "/" (e.g. "meta/llama-3"), so the model is a path segment.
    path(
        "breaker-config/overrides/<name:provider>/<namepath:model>/",
        api.BreakerOverrideApi.as_view(),
        name="api-breaker-override",
    ),
]
