"""Request logs through real faults, end to end: every request's row arrives exactly once.

Real processes (`manage.py run_gateway`, `celery worker -B`) on this test's PostgreSQL database and Redis,
with a FaultProxy (tests/faults.py) in front of the server that fails. Each test compares the set of
`x-vidai-request-id` headers the clients received with the rows in the database, and prints its figures
(README, "Reliability"); durations are printed, never asserted.

FAULT_PG_OUTAGE_SECONDS shortens the PostgreSQL outage for local iterations (60 in CI).
"""

import asyncio
import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest
import redis
from django.db import connection

from gateway.simulator import Behaviour
from requestlogs.models import RequestLog
from requestlogs.stream import StreamKeys
from tests.faults import FaultProxy
from tests.gateway.conftest import sim, world  # noqa: F401 - the gateway test fixtures
from tests.servers import delete_namespace, free_port, production_env, run_async, until, wait_ready

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
OUTAGE_SECONDS = float(os.environ.get("FAULT_PG_OUTAGE_SECONDS", "60"))
RATE = 200  # requests a second
IN_FLIGHT = 64


class Stack:
    """Gateway and Celery worker processes of one test; their output goes to files (a pipe would fill)."""

    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.tmp = tmp_path
        self.redis_url = redis_url
        self.namespace = f"test:faults:{uuid.uuid4().hex}"
        self.env = production_env(redis_url=redis_url, namespace=self.namespace)
        self.stream = self.env["REQUEST_LOG_STREAM"]
        self.procs: list[subprocess.Popen] = []

    def env_with(self, *, db_port: int | None = None, redis_port: int | None = None, **extra: str) -> dict:
        env = {**self.env, **extra}
        if db_port is not None:
            db = connection.settings_dict
            env["DATABASE_URL"] = f"postgres://{db['USER']}@127.0.0.1:{db_port}/{db['NAME']}"
        if redis_port is not None:
            # The same database as the test's Redis URL, through the proxy's port.
            number = redis.Redis.from_url(self.redis_url).connection_pool.connection_kwargs.get("db", 0)
            env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/{number}"
        return env

    def _spawn(self, argv: list[str], env: dict, name: str) -> subprocess.Popen:
        log_path = self.tmp / f"{name}-{len(self.procs)}.log"
        with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
            # A group of its own: a celery worker's embedded beat is a child process, and must die with it.
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        proc.log_path = log_path  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def gateway(self, env: dict) -> tuple[subprocess.Popen, str]:
        port = free_port()
        proc = self._spawn([sys.executable, "manage.py", "run_gateway", "--port", str(port)], env, "gateway")
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc, log=proc.log_path)  # type: ignore[attr-defined]
        return proc, url

    def worker(self, env: dict) -> subprocess.Popen:
        n = len(self.procs)
        return self._spawn(
            [
                sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--beat",
                "--schedule", str(self.tmp / f"beat-schedule-{n}"), "--pool=threads", "--concurrency=2",
                "--loglevel=WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
            ],
            env,
            "worker",
        )  # fmt: skip

    @staticmethod
    def _alive(proc: subprocess.Popen) -> None:
        if proc.poll() is not None:
            raise AssertionError(f"process exited: {proc.log_path.read_text()[-2000:]}")

    @staticmethod
    def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal the process and its children (its group); one already gone is fine."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self.kill(proc)  # whatever of the group is left (an orphaned beat child, say)
        delete_namespace(self.redis_url, self.namespace)


@pytest.fixture
def stack(world, redis_url, tmp_path):  # noqa: F811 - pytest fixture by name
    s = Stack(tmp_path, redis_url)
    try:
        yield s
    finally:
        s.close()


def traffic(url: str, secret: str, *, seconds: float, events: tuple = ()) -> tuple[list[str], collections.Counter]:
    """Send up to RATE requests a second for `seconds`, running each (at_second, action) of `events` on time.

    At most IN_FLIGHT requests are open at once: on a slow machine the rate drops (the figures print the
    count) instead of the client's queue growing without bound. Returns every x-vidai-request-id received
    and the count of each status. A request that got no answer at all fails the test: its id (and so its
    row) would be unknown.
    """

    async def main():
        ids: list[str] = []
        statuses: collections.Counter = collections.Counter()
        slots = asyncio.Semaphore(IN_FLIGHT)
        limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:

            async def one():
                try:
                    response = await client.post(
                        f"{url}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {secret}"}
                    )
                finally:
                    slots.release()
                ids.append(response.headers["x-vidai-request-id"])
                statuses[response.status_code] += 1

            loop = asyncio.get_running_loop()
            start = loop.time()
            schedule = sorted(events, key=lambda e: e[0])
            tasks = []
            for i in range(int(RATE * seconds)):
                while schedule and loop.time() - start >= schedule[0][0]:
                    schedule.pop(0)[1]()
                delay = start + i / RATE - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)  # pacing the load, not waiting for a result
                await slots.acquire()
                tasks.append(asyncio.create_task(one()))
            for at, action in schedule:
                await asyncio.sleep(max(0.0, start + at - loop.time()))
                action()
            await asyncio.gather(*tasks)
        return ids, statuses

    return run_async(main())


def _rows() -> list[str]:
    return list(RequestLog.objects.values_list("request_id", flat=True))


def _wait_rows(expected: set[str], timeout: float) -> float:
    """Wait (bounded) until the database holds a row for every id; return the seconds it took."""
    started = time.monotonic()
    until(lambda: RequestLog.objects.count() >= len(expected), timeout, f"{len(expected)} rows")
    return time.monotonic() - started


def _figures(name: str, **values) -> None:
    print(f"\n[figures] {name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))


def test_a_postgres_outage_under_load_loses_and_duplicates_nothing(stack, world):  # noqa: F811
    db = connection.settings_dict
    with FaultProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as pg:
        env = stack.env_with(db_port=pg.port)
        _, url = stack.gateway(env)
        stack.worker(env)
        client = redis.Redis.from_url(stack.redis_url)
        peak: dict[str, int] = {}

        def restore():
            peak["stream"] = int(client.get(StreamKeys(stack.stream).records) or 0)  # records waiting
            pg.restore()
            peak["restored_at"] = time.monotonic()

        began = time.monotonic()
        ids, statuses = traffic(
            url, world.secret, seconds=OUTAGE_SECONDS + 4, events=((2, pg.down), (2 + OUTAGE_SECONDS, restore))
        )
        sent_for = time.monotonic() - began
        waited = _wait_rows(set(ids), 120)
        drain = time.monotonic() - peak["restored_at"]
        rows = _rows()

    _figures(
        "postgres outage",
        outage_s=OUTAGE_SECONDS,
        requests=len(ids),
        achieved_rate=round(len(ids) / sent_for),
        statuses=dict(statuses),
        stream_peak=peak["stream"],
        rows_expected=len(set(ids)),
        rows_arrived=len(set(rows) & set(ids)),
        duplicates=len(rows) - len(set(rows)),
        drained_s_after_restore=round(drain, 1),
        waited_s_after_traffic=round(waited, 1),
    )
    assert len(set(ids)) == len(ids) > 0
    assert peak["stream"] > 0  # the outage held records back
    assert sorted(rows) == sorted(ids)


def test_a_worker_killed_mid_batch_is_taken_over_and_every_row_arrives_once(stack, world):  # noqa: F811
    db = connection.settings_dict
    with FaultProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as pg:
        worker_env = stack.env_with(db_port=pg.port, REQUEST_LOG_CLAIM_IDLE_SECONDS="3")
        _, url = stack.gateway(stack.env)
        first = stack.worker(worker_env)
        client = redis.Redis.from_url(stack.redis_url)
        warm, _ = traffic(url, world.secret, seconds=1)
        _wait_rows(set(warm), 60)  # the worker is up and ingesting
        # The database holds every byte: the worker reads a batch, then waits on its insert.
        pg.freeze()
        more, _ = traffic(url, world.secret, seconds=4)
        ids = warm + more

        def holding_a_batch():
            stack._alive(first)
            try:
                return client.xpending(stack.stream, "ingest")["pending"]
            except redis.ResponseError:
                return 0  # the group does not exist yet

        held = until(holding_a_batch, 30, "the worker to read a batch")
        stack.kill(first)  # the worker and its beat child, as when its container dies
        first.wait(timeout=10)
        pg.restore()
        second_started = time.monotonic()
        stack.worker(worker_env)
        _wait_rows(set(ids), 60)
        drain = time.monotonic() - second_started
        rows = _rows()

    _figures(
        "worker SIGKILL mid-batch",
        requests=len(ids),
        pending_at_kill=held,
        rows_expected=len(set(ids)),
        rows_arrived=len(set(rows) & set(ids)),
        duplicates=len(rows) - len(set(rows)),
        claim_idle_s=3,
        drained_s_after_new_worker=round(drain, 1),
    )
    assert held > 0
    assert sorted(rows) == sorted(ids)


def test_redis_down_at_gateway_shutdown_spills_and_the_next_start_replays_once(stack, world, tmp_path):  # noqa: F811
    var = tmp_path / "var"
    spill_dir = var / "requestlog-spill"
    target = redis.Redis.from_url(stack.redis_url).connection_pool.connection_kwargs
    with FaultProxy(target.get("host", "127.0.0.1"), int(target.get("port", 6379))) as proxy:
        gateway_env = stack.env_with(redis_port=proxy.port, CONTROLPLANE_VAR_DIR=str(var))
        first, url = stack.gateway(gateway_env)
        stack.worker(stack.env)  # the worker reaches Redis directly
        proxy.down()
        ids, statuses = traffic(url, world.secret, seconds=2.5)
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
        spilled = [line for path in spill_dir.glob("*.jsonl") for line in path.read_bytes().splitlines()]
        rows_before = _rows()

        proxy.restore()
        restarted = time.monotonic()
        stack.gateway(gateway_env)
        _wait_rows(set(ids), 60)
        drain = time.monotonic() - restarted
        rows = _rows()
        left = list(spill_dir.iterdir())

    _figures(
        "redis down at gateway shutdown",
        requests=len(ids),
        statuses=dict(statuses),
        spilled=len(spilled),
        rows_before_restart=len(rows_before),
        rows_expected=len(set(ids)),
        rows_arrived=len(set(rows) & set(ids)),
        duplicates=len(rows) - len(set(rows)),
        replayed_and_stored_s_after_restart=round(drain, 1),
    )
    assert (len(spilled), rows_before) == (len(ids), [])
    assert sorted(rows) == sorted(ids)
    assert left == []


def test_a_forced_exit_with_redis_down_spills_every_record_even_the_one_cut_off(stack, world, tmp_path):  # noqa: F811
    """A second Ctrl-C makes uvicorn skip the lifespan's shutdown: the sink is stopped at the interpreter's exit
    instead, and spills the records it holds, the request cut off by the exit included."""
    var = tmp_path / "var"
    spill_dir = var / "requestlog-spill"
    with FaultProxy.for_redis(stack.redis_url) as proxy:
        gateway, url = stack.gateway(stack.env_with(redis_port=proxy.port, CONTROLPLANE_VAR_DIR=str(var)))
        proxy.down()
        ids, statuses = traffic(url, world.secret, seconds=0.5)
        for name in ("openai", "backup", "third"):  # one more request, still open at the exit: every provider
            world.sim.behaviours[name] = Behaviour(mode="hang")  # of its chain hangs, for 5 s each
        calls_before = world.sim.requests.get("openai", 0)
        cut_off = threading.Thread(target=_post_expecting_no_answer, args=(url, world.secret), daemon=True)
        cut_off.start()
        until(lambda: world.sim.requests.get("openai", 0) > calls_before, 10, "the open request upstream")

        gateway.send_signal(signal.SIGINT)  # graceful: stops accepting, then waits for the open request
        until(lambda: _refused(url), 10, "the gateway to stop accepting")
        gateway.send_signal(signal.SIGINT)  # forced: no lifespan shutdown
        gateway.wait(timeout=60)
        cut_off.join(timeout=10)
        spilled = [orjson.loads(line) for path in spill_dir.glob("*.jsonl") for line in path.read_bytes().splitlines()]

    _figures("forced exit, redis down", requests=len(ids), statuses=dict(statuses), spilled=len(spilled))
    assert statuses == collections.Counter({200: len(ids)})
    sent = set(ids)
    assert sorted(r["request_id"] for r in spilled if r["request_id"] in sent) == sorted(ids)
    assert len(spilled) == len(ids) + 1  # and the request cut off, which no client saw an id for
    assert "not stopped before exit" in gateway.log_path.read_text()  # type: ignore[attr-defined]


def _post_expecting_no_answer(url: str, secret: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{url}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {secret}"}, timeout=60)


def _refused(url: str) -> bool:
    port = int(url.rsplit(":", 1)[1])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False
