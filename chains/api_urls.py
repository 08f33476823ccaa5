from django.urls import path  # noqa: F401

api_urlpatterns: list = []
