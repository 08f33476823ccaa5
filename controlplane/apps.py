import os

from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Control Plane"

    def ready(self) -> None:
        # Load the Celery app so @shared_task binds to it in the console and the workers. The gateway
        # process never enqueues tasks; skipping Celery there saves about 20 MiB of resident memory.
        if os.environ.get("CONTROLPLANE_PROCESS") != "gateway":
            import controlplane.celery  # noqa: F401
