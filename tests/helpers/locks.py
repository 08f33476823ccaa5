"""Seeing a thread wait on a PostgreSQL lock, so a test's race is certain rather than likely."""

import threading
import time

from django.db import connections


def waits_on_a_lock(thread: threading.Thread, *, query_like: str = "%", timeout: float = 10) -> bool:
    """True once a backend of this database waits on a lock with a query matching `query_like` (SQL LIKE); False
    if `thread` ends first or `timeout` seconds pass. Polls pg_stat_activity: nothing else tells."""
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE %s",
                [query_like],
            )
            if cursor.fetchone()[0]:
                return True
        time.sleep(0.01)
    return False
