from django.urls import path

from chains import views

app_name = "chains"

urlpatterns = [
    path("", views.chain_list_view, name="list"),
    path("new/", views.chain_create_view, name="create"),
    path("resilience/", views.resilience_defaults_view, name="resilience"),
    path("notice/dismiss/", views.selection_notice_dismiss_view, name="notice-dismiss"),
    path("<int:chain_id>/edit/", views.chain_edit_view, name="edit"),
    path("<int:chain_id>/toggle/", views.chain_toggle_view, name="toggle"),
    path("<int:chain_id>/delete/", views.chain_delete_view, name="delete"),
]
