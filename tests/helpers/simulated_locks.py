"""PostgreSQL's row and advisory locks, simulated on SQLite for the `*_simulated` race tests.

SQLite serialises writers, so a race test there runs "the other transaction" at the exact point of the
PostgreSQL interleaving, inside the first one (its service's atomic block is then a savepoint). That is what
PostgreSQL would do only while the other transaction asks for no lock the first one holds; when it does, it
waits there until the first one ends. `simulate_locks` records the locks the transaction under test takes (the
rows a select_for_update returns, the keys of core.db.advisory_lock); inside `locks.other_transaction()` asking
for one of them raises WouldWait, which rolls the other transaction's savepoint back. The test then runs it
again after the first one committed (`locks.release()`), as PostgreSQL would have.

Only explicit locks are modelled (not the row locks of UPDATE and DELETE): the fixes under test take those.
"""

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db.models import QuerySet
from django.db.models.query import ModelIterable

import core.db

LockKey = tuple[str, Any]


class WouldWait(Exception):
    """The other transaction asked for a lock the transaction under test holds: PostgreSQL would wait here."""


class SimulatedLocks:
    def __init__(self) -> None:
        self.held: set[LockKey] = set()
        self.taken: list[LockKey] = []  # by the transaction under test, in order
        self.waiting: list[Callable[[], Any]] = []
        self._other = False
        self._quiet = False

    def take(self, key: LockKey) -> None:
        if self._other:
            if key in self.held:
                raise WouldWait(key)
            return
        if key not in self.held:
            self.held.add(key)
            self.taken.append(key)

    @contextlib.contextmanager
    def other_transaction(self) -> Iterator[None]:
        """Run the other transaction's code: a lock the transaction under test holds raises WouldWait."""
        self._other = True
        try:
            yield
        finally:
            self._other = False

    def release(self) -> None:
        """The transaction under test ended: its locks are free."""
        self.held.clear()

    def run_other(self, write: Callable[[], Any]) -> bool:
        """Run `write` as the other transaction, here: True when it ran through, False when PostgreSQL would have
        made it wait (it is kept in `waiting`, its savepoint rolled back)."""
        with self.other_transaction():
            try:
                write()
            except WouldWait:
                self.waiting.append(write)
                return False
        return True

    def resume(self) -> list[Any]:
        """The transaction under test committed: run the writes that waited for it, in order; what each returned,
        or the exception it raised."""
        self.release()
        outcomes: list[Any] = []
        for write in self.waiting:
            try:
                outcomes.append(write())
            except Exception as exc:  # the outcome under test, e.g. a ValidationFailed
                outcomes.append(exc)
        self.waiting.clear()
        return outcomes

    def kinds(self) -> list[str]:
        """What was locked, in order, one entry per lock: "catalog.LlmModel", "advisory", ..."""
        return [kind for kind, _ in self.taken]

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False


def simulate_locks(monkeypatch: pytest.MonkeyPatch) -> SimulatedLocks:
    """Record select_for_update's rows and core.db.advisory_lock's keys from now on (undone with monkeypatch)."""
    locks = SimulatedLocks()
    fetch_all = QuerySet._fetch_all

    def fetching(qs: QuerySet) -> None:
        fetch_all(qs)
        if not qs.query.select_for_update or locks._quiet:
            return
        if qs._iterable_class is ModelIterable:
            pks = [obj.pk for obj in qs._result_cache or []]
        else:
            clone = qs.all()
            clone.query.select_for_update = False
            with locks.quiet():
                pks = list(clone.values_list("pk", flat=True))
        for pk in pks:
            locks.take((qs.model._meta.label, pk))

    monkeypatch.setattr(QuerySet, "_fetch_all", fetching)
    advisory_lock = getattr(core.db, "advisory_lock", None)
    if advisory_lock is not None:

        def advisory(key: str, **kwargs: Any) -> None:
            advisory_lock(key, **kwargs)
            locks.take(("advisory", key))

        monkeypatch.setattr(core.db, "advisory_lock", advisory)
    return locks
