"""Two real transactions racing on PostgreSQL (production mode): the first pauses holding its locks, the second
runs into them, and the test sees the second wait on a lock before it lets the first go on."""

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from core.errors import ApplicationError
from tests.helpers.locks import waits_on_a_lock

FIRST = "race-first"


class Pause:
    """Call it where the first transaction should stop; it does only in the first transaction's thread."""

    def __init__(self) -> None:
        self.reached, self.go = threading.Event(), threading.Event()

    def __call__(self) -> None:
        if threading.current_thread().name == FIRST:
            self.reached.set()
            self.go.wait(10)


def race(first: Callable[[], Any], second: Callable[[], Any], pause: Pause) -> tuple[dict[str, Any], bool]:
    """Run `first` until `pause`, then `second`; let `first` go once `second` waits on a lock (or has ended).

    Returns each one's outcome ("ok", an ApplicationError's status code, or the repr of another exception) and
    whether `second` waited on a lock."""
    outcome: dict[str, Any] = {}

    def run(name: str, write: Callable[[], Any]) -> None:
        try:
            write()
            outcome[name] = "ok"
        except ApplicationError as exc:
            outcome[name] = exc.status_code
        except Exception as exc:  # a deadlock or a failed commit: what these tests must not see
            outcome[name] = repr(exc)
        finally:
            connections.close_all()

    first_thread = threading.Thread(target=run, args=("first", first), name=FIRST)
    first_thread.start()
    assert pause.reached.wait(10)
    second_thread = threading.Thread(target=run, args=("second", second))
    second_thread.start()
    blocked = waits_on_a_lock(second_thread)
    pause.go.set()
    first_thread.join(15)
    second_thread.join(15)
    return outcome, blocked


def pause_after(monkeypatch: Any, module: Any, name: str, pause: Pause) -> None:
    """Make `module.name` pause (in the race's first transaction only) once it has run."""
    original = getattr(module, name)

    def run_then_pause(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        pause()
        return result

    monkeypatch.setattr(module, name, run_then_pause)


def pause_before(monkeypatch: Any, module: Any, name: str, pause: Pause) -> None:
    """Make `module.name` pause (in the race's first transaction only) before it runs."""
    original = getattr(module, name)

    def pause_then_run(*args: Any, **kwargs: Any) -> Any:
        pause()
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, pause_then_run)
