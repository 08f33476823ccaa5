from django.apps import AppConfig


class ChainsConfig(AppConfig):
    name = "chains"
