from django.apps import AppConfig


class RequestlogsConfig(AppConfig):
    name = "requestlogs"
