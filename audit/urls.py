from django.urls import path

app_name = "audit"

urlpatterns: list = []

api_urlpatterns: list = []
