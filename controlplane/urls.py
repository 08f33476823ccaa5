from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from access import views as access_views
from alerts import api_urls as alerts_api
from audit import api_urls as audit_api
from catalog import api_urls as catalog_api
from chains import api_urls as chains_api
from core.permissions import IsAdminRole
from dashboards import views as dashboard_views
from dashboards.metrics import metrics_view
from health import api_urls as health_api
from requestlogs import api_urls as requestlogs_api
from routing import api_urls as routing_api

api_urlpatterns = [
    *chains_api.api_urlpatterns,
    *catalog_api.api_urlpatterns,
    *routing_api.api_urlpatterns,
    *audit_api.api_urlpatterns,
    *health_api.api_urlpatterns,
    *requestlogs_api.api_urlpatterns,
    *alerts_api.api_urlpatterns,
    # The schema maps every configuration endpoint: admin only, like the endpoints themselves.
    path("schema/", SpectacularAPIView.as_view(permission_classes=[IsAdminRole]), name="api-schema"),
]

urlpatterns = [
    # The Dashboard for admin and bi_read_only; anyone else is sent on by core.views.home.
    path("", dashboard_views.dashboard, name="home"),
    path("", dashboard_views.dashboard, name="dashboard"),
    path("login/", access_views.login, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("fallback/", RedirectView.as_view(pattern_name="chains:list", permanent=False), name="fallback"),
    path("fallback/chains/", include("chains.urls")),
    path("fallback/health/", include("health.urls")),
    path("audit/", include("audit.urls")),
    path("logs/", include("requestlogs.urls")),
    path("alerts/", include("alerts.urls")),
    path("api/", include(api_urlpatterns)),
    # Prometheus (docs/metrics.md): allowed networks or an admin console token.
    path("metrics", metrics_view, name="metrics"),
    # Before admin.site.urls: the admin's login, answering 429 while locked out.
    path("admin/login/", access_views.admin_login, name="admin-login"),
    path("admin/", admin.site.urls),
]

handler404 = "core.views.not_found"
