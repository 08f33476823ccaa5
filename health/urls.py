from django.urls import path

app_name = "health"

urlpatterns: list = []

api_urlpatterns: list = []
