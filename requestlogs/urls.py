from django.urls import path

from requestlogs import views

app_name = "requestlogs"

urlpatterns = [
    path("", views.request_log_list_view, name="list"),
    path("export.csv", views.request_log_export_view, name="export"),
    path("<str:request_id>/", views.request_log_detail_view, name="detail"),
]
