"""Hostile and maximal request bodies against one production-mode gateway worker.

Starts the simulator and ONE gateway worker (`manage.py run_gateway`: Redis breaker, request
logs to a Redis stream, config from a SQLite file this script prepares, like bench/gateway.py),
then sends rounds of concurrent bodies while another process polls /healthz every 10 ms:

    small     the most messages the limits allow, each carrying a string, ~10 MiB in all
    huge      two messages of ~5 MiB strings each
    hostile   ~3.5 million empty messages in ~10 MiB (must get a fast 400 and reach no upstream)
    escapes   2,048 messages of escape-heavy text (quotes, backslashes, newlines), ~10 MiB
    wide      144 KiB: 49,000 empty objects under `metadata` (small, but many values to walk)
    deep-wide 70 KB: 70 levels under one key beside 20,000 objects under a 10,000-character key (400)
    chunked   small bodies sent without Content-Length (chunked), against a 1 s upstream
    slow      clients that declare 1 MiB and trickle a byte a second (408 after the body read
              timeout, GATEWAY_BODY_READ_TIMEOUT_SECONDS=5 here), while 20 ordinary requests run

It prints, per round, the statuses, the slowest answer, the worker's peak resident memory (sampled
from /proc/<pid>/status every 20 ms, and VmHWM), its memory after the round, and /healthz max and
p99 latency. A watchdog stops the worker if it passes --rss-limit MiB (the machine is shared).

    .venv/bin/python bench/hostile_bodies.py [--concurrency 50] [--hostile-concurrency 50]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gateway import free_port, prepare, stack_env, start_stack  # noqa: E402

MIB = 1024 * 1024
BODY_LIMIT = 10 * MIB
MESSAGES = 2048


def small_body() -> bytes:
    """MESSAGES messages, each with one string, filling the body limit."""
    head = b'{"model":"gpt-4o","messages":['
    overhead = len(b'{"role":"user","content":""},') * MESSAGES + len(head) + 2
    each = (BODY_LIMIT - overhead - 4096) // MESSAGES
    text = ("lorem ipsum, dolor: sit {amet} " * (each // 31 + 1))[:each]
    message = json.dumps({"role": "user", "content": text}, separators=(",", ":")).encode()
    return head + b",".join([message] * MESSAGES) + b"]}"


def huge_body() -> bytes:
    """Two messages of ~5 MiB strings."""
    each = (BODY_LIMIT - 4096) // 2
    text = ("All work and no play makes Jack a dull boy. " * (each // 44 + 1))[:each]
    messages = [{"role": "system", "content": text}, {"role": "user", "content": text}]
    return json.dumps({"model": "gpt-4o", "messages": messages}, separators=(",", ":")).encode()


def hostile_body() -> bytes:
    """~3.5 million empty messages in ~10 MiB."""
    head = b'{"model":"gpt-4o","messages":['
    count = (BODY_LIMIT - len(head) - 8) // 3
    return head + b",".join([b"{}"] * count) + b"]}"


def escapes_body() -> bytes:
    """MESSAGES messages of escape-heavy text filling the body limit."""
    text = 'He said "hi"\n\tthen left; path C:\\tmp\\x, JSON {"a": [1, 2]}. ' * 60
    message = json.dumps({"role": "user", "content": text}, separators=(",", ":")).encode()
    count = min(MESSAGES, (BODY_LIMIT - 4096) // (len(message) + 1))
    return b'{"model":"gpt-4o","messages":[' + b",".join([message] * count) + b"]}"


def wide_body() -> bytes:
    return (
        b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"metadata":['
        + b",".join([b"{}"] * 49_000)
        + b"]}"
    )


def deep_wide_body() -> bytes:
    deep: dict = {}
    for _ in range(70):
        deep = {"a": deep}
    return json.dumps({"model": "gpt-4o", "a": deep, "k" * 10_000: [{}] * 20_000}, separators=(",", ":")).encode()


async def slow_clients(url: str, key: str, n: int) -> dict[int, int]:
    """n clients declaring 1 MiB and sending a byte a second; {status: count} of their answers (0: none in 30 s)."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")

    async def one() -> int:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {key}\r\nContent-Length: {MIB}\r\n\r\n".encode()
            + b'{"model":"gpt-4o"'
        )
        try:
            for _ in range(30):  # no answer in 30 s counts as 0
                try:
                    line = await asyncio.wait_for(reader.readline(), 1.0)
                    return int(line.split()[1]) if line else 0
                except TimeoutError:
                    writer.write(b" ")
                    await writer.drain()
            return 0
        except (OSError, ValueError, IndexError):
            return 0
        finally:
            writer.close()

    statuses: dict[int, int] = {}
    for status in await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), 60):
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


def rss_of(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            values[key] = int(value.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


class Sampler(threading.Thread):
    """Samples the worker's RSS every 20 ms; kills it past `limit` MiB."""

    def __init__(self, pid: int, limit: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.limit = pid, limit
        self.peak = 0.0
        self.killed = False
        self.stop = threading.Event()

    def reset(self) -> None:
        self.peak = 0.0

    def run(self) -> None:
        while not self.stop.wait(0.02):
            try:
                rss, _ = rss_of(self.pid)
            except (FileNotFoundError, ProcessLookupError, KeyError):
                return
            self.peak = max(self.peak, rss)
            if rss > self.limit:
                self.killed = True
                os.kill(self.pid, 9)
                return


def poll_healthz(url: str, out: str, stop_file: str) -> None:
    """Child process: GET /healthz every 10 ms on one keep-alive connection; one latency (ms) per line."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    with open(out, "w") as f:
        while not os.path.exists(stop_file):
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                f.write(f"{(time.perf_counter() - t0) * 1000:.3f}\n")
            except (OSError, http.client.HTTPException):
                f.write("error\n")
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
            f.flush()
            time.sleep(0.01)


async def send_round(
    url: str, key: str, body: bytes, n: int, *, chunked: bool = False
) -> tuple[dict[int, int], float, float]:
    """n concurrent POSTs of `body` (in 4 chunks, no Content-Length, if `chunked`): ({status: count},
    slowest answer s, wall time s)."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    statuses: dict[int, int] = {}
    slowest = 0.0
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def pieces() -> AsyncIterator[bytes]:
            step = len(body) // 4 + 1
            for i in range(0, len(body), step):
                yield body[i : i + step]

        async def one() -> None:
            nonlocal slowest
            t0 = time.perf_counter()
            try:
                response = await client.post(url, content=pieces() if chunked else body, headers=headers)
                status = response.status_code
            except httpx.HTTPError:
                status = 0  # connection refused or reset
            slowest = max(slowest, time.perf_counter() - t0)
            statuses[status] = statuses.get(status, 0) + 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
    return statuses, slowest, time.perf_counter() - t0


async def slow_round(url: str, key: str, body: bytes, n: int) -> tuple[dict[int, int], float, float]:
    """n slow clients and, meanwhile, 20 ordinary requests: their statuses together (the slow ones' 408s)."""
    t0 = time.perf_counter()
    slow = asyncio.ensure_future(slow_clients(url, key, n))
    await asyncio.sleep(1)
    statuses, slowest, _ = await send_round(url, key, body, 20)
    for status, count in (await slow).items():
        statuses[status] = statuses.get(status, 0) + count
    return statuses, slowest, time.perf_counter() - t0


def latencies(path: str) -> tuple[list[float], int]:
    values, errors = [], 0
    for line in Path(path).read_text().splitlines():
        if line == "error":
            errors += 1
        elif line:
            values.append(float(line))
    return values, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--hostile-concurrency", type=int, default=50)
    parser.add_argument("--rss-limit", type=float, default=4096, help="MiB; the worker is killed past it")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--poll", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll:
        poll_healthz(*args.poll)
        return

    small = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
    bodies = {
        "small": small_body(),
        "huge": huge_body(),
        "hostile": hostile_body(),
        "escapes": escapes_body(),
        "wide": wide_body(),
        "deep-wide": deep_wide_body(),
        "chunked": small,
        "slow": small,
    }
    work = Path(tempfile.mkdtemp(prefix="cp-hostile-"))
    sim_port, gw_port = free_port(), free_port()
    sim_url, gw_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gw_port}"
    namespace = f"bench:{uuid.uuid4().hex[:8]}"
    env = {**stack_env(work, args.redis_url, namespace), "GATEWAY_BODY_READ_TIMEOUT_SECONDS": "5"}
    key = prepare(env, sim_url)
    procs: list[subprocess.Popen] = []
    # round, concurrent, body bytes, statuses, slowest, wall, peak RSS, RSS after, VmHWM, /healthz log, upstream
    rows: list[tuple[str, int, int, dict[int, int], float, float, float, float | None, float | None, str, int | None]]
    rows = []
    after: float | None  # None in a row: the round's worker was killed
    hwm: float | None
    upstream: int | None
    stop_file = str(work / "stop")
    try:
        pid = start_stack(env, sim_port=sim_port, gw_port=gw_port, procs=procs)
        chat = f"{gw_url}/v1/chat/completions"
        asyncio.run(send_round(chat, key, small, 20))  # warm up
        baseline, _ = rss_of(pid)
        sampler = Sampler(pid, args.rss_limit)
        sampler.start()
        for name in bodies:
            n = args.hostile_concurrency if name in ("hostile", "deep-wide", "slow") else args.concurrency
            upstream_before = _upstream_calls(sim_url)
            out = str(work / f"healthz-{name}.txt")
            if os.path.exists(stop_file):
                os.unlink(stop_file)
            poller = subprocess.Popen([sys.executable, __file__, "--poll", gw_url, out, stop_file], cwd=ROOT)
            time.sleep(0.3)  # let the poller take its first samples before the load starts
            sampler.reset()
            if name == "chunked":  # an upstream that takes 1 s: the bodies' room must not wait for it
                httpx.put(f"{sim_url}/_sim/providers/openai", json={"latency_ms": 1000}, timeout=30)
            if name == "slow":
                statuses, slowest, wall = asyncio.run(slow_round(chat, key, bodies[name], n))
            else:
                statuses, slowest, wall = asyncio.run(send_round(chat, key, bodies[name], n, chunked=name == "chunked"))
            if name == "chunked":
                httpx.delete(f"{sim_url}/_sim/providers/openai", timeout=30)
            time.sleep(0.3)
            Path(stop_file).touch()
            poller.wait(timeout=60)
            peak = sampler.peak
            if sampler.killed:
                rows.append((name, n, len(bodies[name]), statuses, slowest, wall, peak, None, None, out, None))
                break
            after, hwm = rss_of(pid)
            upstream = _upstream_calls(sim_url) - upstream_before
            rows.append((name, n, len(bodies[name]), statuses, slowest, wall, peak, after, hwm, out, upstream))
        time.sleep(2)
        settled = None if sampler.killed else rss_of(pid)[0]
        sampler.stop.set()
    finally:
        Path(stop_file).touch()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        import redis

        client = redis.Redis.from_url(args.redis_url)
        for k in client.scan_iter(f"{namespace}*"):
            client.delete(k)

    print(
        f"\nHostile bodies — {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}), one gateway worker, "
        f"resident memory after warm-up {baseline:.0f} MiB\n"
    )
    print(
        "| round | concurrent | body | statuses | slowest answer | round time | peak RSS | RSS after | VmHWM "
        "| /healthz max | /healthz p99 | /healthz samples (errors) | upstream calls |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, size, statuses, slowest, wall, peak, after, hwm, out, upstream in rows:
        values, errors = latencies(out)
        p99 = statistics.quantiles(values, n=100)[98] if len(values) >= 2 else float("nan")
        mx = max(values) if values else float("nan")
        status_text = ", ".join(f"{count}×{status}" for status, count in sorted(statuses.items()))
        after_text = f"{after:.0f} MiB" if after is not None else "killed"
        hwm_text = f"{hwm:.0f} MiB" if hwm is not None else "—"
        print(
            f"| {name} | {n} | {size / MIB:.1f} MiB | {status_text} | {slowest:.2f} s | {wall:.2f} s "
            f"| {peak:.0f} MiB | {after_text} | {hwm_text} | {mx:.1f} ms | {p99:.1f} ms | {len(values)} ({errors}) "
            f"| {upstream if upstream is not None else '—'} |"
        )
    if sampler.killed:
        print(f"\nThe worker passed {args.rss_limit:.0f} MiB and was killed by the watchdog.")
    else:
        print(f"\nResident memory 2 s after the last round: {settled:.0f} MiB")
    shutil.rmtree(work, ignore_errors=True)


def _upstream_calls(sim_url: str) -> int:
    state = httpx.get(f"{sim_url}/_sim/state", timeout=30).json()
    return sum(entry["requests"] for entry in state.values())


if __name__ == "__main__":
    main()
