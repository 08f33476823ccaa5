from celery import shared_task

from access.services import auth_throttles_prune


@shared_task(name="access.prune", ignore_result=True)
def prune_task() -> int:
    """Delete sign-in throttle rows whose failures and lockout have all expired."""
    return auth_throttles_prune()
