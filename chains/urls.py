from django.urls import path

app_name = "chains"

urlpatterns: list = []

api_urlpatterns: list = []
