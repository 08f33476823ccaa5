from django.urls import path

from audit import views

app_name = "audit"

urlpatterns = [
    path("", views.audit_list_view, name="list"),
]
