"""Two writers that lock the same rows in opposite orders: PostgreSQL aborts one (a deadlock). Its request answers
409 with a message, in the API and in the console, instead of a 500; nothing of it was saved."""

import threading

import pytest
from django.db import OperationalError, connection, connections, transaction

from catalog.models import Provider
from core.api import exception_handler
from core.errors import CONCURRENT_ABORT_MESSAGE, concurrent_abort
from core.middleware import ConcurrentAbortMiddleware
from tests.factories import ProviderFactory

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


def _deadlock() -> OperationalError:
    """Run two transactions that lock two rows in opposite orders; return the loser's error."""
    first, second = ProviderFactory(name="a").pk, ProviderFactory(name="b").pk
    both_locked_one = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    def writer(pks: tuple[int, int]) -> None:
        try:
            with transaction.atomic():
                list(Provider.objects.select_for_update().filter(pk=pks[0]))
                both_locked_one.wait()
                list(Provider.objects.select_for_update().filter(pk=pks[1]))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(order,)) for order in ((first, second), (second, first))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(errors) == 1, errors
    assert isinstance(errors[0], OperationalError)
    return errors[0]


def test_a_deadlocked_request_is_a_409_with_a_message():
    assert connection.vendor == "postgresql"
    error = _deadlock()

    response = exception_handler(error, {})
    console = ConcurrentAbortMiddleware(lambda request: None).process_exception(None, error)  # type: ignore[arg-type]

    assert concurrent_abort(error) is True
    assert response is not None and response.status_code == 409
    assert response.data["detail"] == CONCURRENT_ABORT_MESSAGE
    assert console is not None and console.status_code == 409
    assert console.content.decode() == CONCURRENT_ABORT_MESSAGE


def test_other_database_errors_stay_errors():
    assert concurrent_abort(OperationalError("connection refused")) is False
    assert ConcurrentAbortMiddleware(lambda request: None).process_exception(None, OperationalError("x")) is None  # type: ignore[arg-type]
