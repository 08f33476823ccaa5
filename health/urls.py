from django.urls import path

from health import views

app_name = "health"

urlpatterns = [
    path("", views.index, name="index"),
    path("reset/", views.reset, name="reset"),
    path("events/", views.events, name="events"),
    path("force-open/", views.force_open, name="force-open"),
    path("drain/", views.drain, name="drain"),
    path("release/", views.release, name="release"),
    path("configure/", views.configure, name="configure"),
    path("configure/override/", views.override_set, name="override-set"),
    path("configure/override/delete/", views.override_delete, name="override-delete"),
]
