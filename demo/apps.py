from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Demo data for `make run` (seed_demo); above every other app, since it writes through their services."""

    name = "demo"
    verbose_name = "Demo"
