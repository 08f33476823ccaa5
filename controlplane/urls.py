from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from audit import urls as audit_urls
from catalog import urls as catalog_urls
from chains import urls as chains_urls
from controlplane import views
from health import urls as health_urls

api_urlpatterns = [
    *chains_urls.api_urlpatterns,
    *catalog_urls.api_urlpatterns,
    *audit_urls.api_urlpatterns,
    *health_urls.api_urlpatterns,
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="auth/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("fallback/", RedirectView.as_view(pattern_name="chains:list", permanent=False), name="fallback"),
    path("fallback/chains/", include(chains_urls)),
    path("fallback/health/", include(health_urls)),
    path("audit/", include(audit_urls)),
    path("api/", include(api_urlpatterns)),
    path("admin/", admin.site.urls),
]
