from django.urls import path

from alerts import views

app_name = "alerts"

urlpatterns = [
    path("", views.alert_list_view, name="list"),
    path("<int:alert_id>/", views.alert_detail_view, name="detail"),
    path("rules/new/", views.rule_create_view, name="rule-create"),
    path("rules/<int:rule_id>/edit/", views.rule_edit_view, name="rule-edit"),
    path("rules/<int:rule_id>/toggle/", views.rule_toggle_view, name="rule-toggle"),
    path("rules/<int:rule_id>/delete/", views.rule_delete_view, name="rule-delete"),
]
