"""Gateway benchmark: the gateway against the same simulator called directly.

Starts the simulator and ONE gateway worker process (`manage.py run_gateway`,
production mode: Redis-backed breaker, request logs to a Redis stream, config
from a SQLite file this script prepares), drives both with wrk (C, so the load
generator is not the bottleneck), and prints requests/s and p50/p99 latency at
concurrency 1, 16 and 64, the same with the primary failing and fallback serving
(the chain's resilience policy off, the default, and on, in slices alternating with the healthy runs),
streaming time to first byte (chunks back to back, and paced 10 ms apart as a model's tokens come, the
paced ones also through bench/reference_proxy.py's two minimal proxies: what any Python hop adds here), resident
memory and CPU time per request; then the cross-protocol paths
(issue 11: an OpenAI client to an Anthropic upstream, an Anthropic client to an OpenAI upstream) against the
same-protocol one, interleaved: streaming time to the first event and to the first content, and req/s at
concurrency 16.

    .venv/bin/python bench/gateway.py [--duration 8] [--connections 1,16,64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple, TypedDict

import httpx

ROOT = Path(__file__).resolve().parents[1]
BODY = '{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello in five words."}]}'
# gpt-4o-b's provider always answers 503: once its circuit is open, its chain serves (fallback runs).
FALLBACK_BODY = BODY.replace('"gpt-4o"', '"gpt-4o-b"')
# gpt-4o-r is on the same failing provider, but its chain has the resilience policy on: the same failover
# through the attempt loop and its planner, so the two rows differ by the policy's cost only.
RESILIENT_BODY = BODY.replace('"gpt-4o"', '"gpt-4o-r"')
STREAM_BODY = '{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Say hello."}]}'
# claude-a's provider speaks the Anthropic Messages API (the simulator's `/anthro/v1/messages`).
ANTHROPIC_UPSTREAM_BODY = BODY.replace('"gpt-4o"', '"claude-a"')
ANTHROPIC_UPSTREAM_STREAM = STREAM_BODY.replace('"gpt-4o"', '"claude-a"')
# An Anthropic client (`POST /v1/messages`, which needs max_tokens) of the OpenAI-speaking gpt-4o.
MESSAGES_BODY = BODY.replace('"messages"', '"max_tokens":64,"messages"')
MESSAGES_STREAM = STREAM_BODY.replace('"messages"', '"max_tokens":64,"messages"')
ANTHROPIC_VERSION = "2023-06-01"
# The first content of a stream: an OpenAI delta with non-empty `content` (the opening chunk's is ""), or an
# Anthropic `content_block_delta` (after message_start, content_block_start and ping).
FIRST_CONTENT = re.compile(rb'"content":\s*"[^"]|content_block_delta')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} not ready after {timeout}s")


def machine_note() -> str:
    """What decides how comparable two runs are: how fast this machine runs Python now, and whether an idle
    vCPU polls before it halts (docs/performance.md, round nine: at c=1 that decides the figures)."""
    import timeit

    best = min(timeit.repeat("sum(range(100))", number=100_000, repeat=5)) / 100_000 * 1e6
    note = f"sum(range(100)) {best:.2f} µs"
    cpuidle = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    poll = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    if cpuidle.exists():
        note += f"; cpuidle driver {cpuidle.read_text().strip()}"
    if poll.exists():
        ns = int(poll.read_text())
        note += f", guest_halt_poll_ns {ns}" + (" (an idle vCPU halts at once)" if ns == 0 else "")
    return note


def stack_env(work: Path, redis_url: str, namespace: str) -> dict[str, str]:
    """The environment of a bench stack: its own SQLite file and var dir under `work`, Redis keys under
    `namespace` (the breaker and the request-log stream), warnings only."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"sqlite:///{work / 'bench.sqlite3'}",
        "REDIS_URL": redis_url,
        "SECRET_KEY": "bench-" + uuid.uuid4().hex,
        "BREAKER_REDIS_NAMESPACE": namespace,
        "REQUEST_LOG_STREAM": f"{namespace}:requestlogs",
        "CONTROLPLANE_VAR_DIR": str(work),
        "LOG_LEVEL": "WARNING",
    }


def stop_stack(procs: list[subprocess.Popen], redis_url: str, namespace: str, work: Path | None) -> None:
    """Stop the stack's processes (last started first), delete its Redis keys and its files (`work`, unless
    None: the caller still reads them)."""
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=30)
    import redis

    client = redis.Redis.from_url(redis_url)
    for k in client.scan_iter(f"{namespace}*"):
        client.delete(k)
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)


def prepare(env: dict[str, str], sim_url: str) -> str:
    """Migrate the bench database and create providers, models, a chain and a key; return the key."""
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    script = f"""
from decimal import Decimal
from django.contrib.auth import get_user_model
from catalog.models import LlmModel, Provider
from catalog.services import api_key_create
from chains.services import ChainInput, EntryInput, chain_create
openai = Provider.objects.create(name="openai", base_url="{sim_url}/openai/v1", api_key="sk-bench")
backup = Provider.objects.create(name="backup", base_url="{sim_url}/backup/v1", api_key="sk-bench")
broken = Provider.objects.create(name="broken", base_url="{sim_url}/fail-503/v1", api_key="sk-bench")
anthro = Provider.objects.create(name="anthro", protocol="anthropic", base_url="{sim_url}/anthro", api_key="sk-bench")
LlmModel.objects.create(name="gpt-4o", provider=openai, input_price_per_mtok=Decimal("2.5"), output_price_per_mtok=10)
LlmModel.objects.create(name="claude", provider=backup, input_price_per_mtok=Decimal("3"), output_price_per_mtok=15)
LlmModel.objects.create(name="gpt-4o-b", provider=broken, input_price_per_mtok=Decimal("2.5"), output_price_per_mtok=10)
LlmModel.objects.create(name="gpt-4o-r", provider=broken, input_price_per_mtok=Decimal("2.5"), output_price_per_mtok=10)
LlmModel.objects.create(name="claude-a", provider=anthro, input_price_per_mtok=Decimal("3"), output_price_per_mtok=15)
chain_create(actor=None, data=ChainInput(name="bench", source_model="gpt-4o", entries=[EntryInput("claude")]))
for name, source, policy in (("broken", "gpt-4o-b", False), ("resilient", "gpt-4o-r", True)):
    chain_create(actor=None, data=ChainInput(
        name=name, source_model=source, entries=[EntryInput("claude")], resilience={{"enabled": policy}}
    ))
user = get_user_model().objects.create_user("bench")
print(api_key_create(actor=None, name="bench", user=user).secret)
"""
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def start_simulator(env: dict[str, str], port: int, procs: list[subprocess.Popen]) -> None:
    """Start the simulator on `port` (appended to `procs` at once) and wait until it answers."""
    sim = subprocess.Popen(
        [sys.executable, "manage.py", "run_simulator", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    procs.append(sim)
    wait_ready(f"http://127.0.0.1:{port}/_sim/state", sim)


def start_stack(
    env: dict[str, str], *, sim_port: int, gw_port: int, procs: list[subprocess.Popen], workers: int = 1
) -> int:
    """Start the simulator and `run_gateway` (one worker unless told), wait until both answer; returns the
    pid whose proc_stats are the gateway's (the worker, or with several the supervisor of them all).

    Started processes are appended to `procs` as they start, so the caller's cleanup stops them even
    when a later step fails.
    """
    start_simulator(env, sim_port, procs)
    gw = subprocess.Popen(
        [sys.executable, "manage.py", "run_gateway", "--port", str(gw_port), "--workers", str(workers)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    procs.append(gw)
    wait_ready(f"http://127.0.0.1:{gw_port}/readyz", gw)
    return _worker_pid(gw.pid, workers)


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * _UNITS[m.group(2)]


class WrkResult(TypedDict):
    rps: float
    p50: float
    p99: float
    requests: int
    errors: int


def _found(pattern: str, text: str) -> str:
    """The first group of `pattern` in wrk's report (every run prints it)."""
    match = re.search(pattern, text)
    assert match is not None, f"{pattern!r} not in wrk's output:\n{text}"
    return match.group(1)


def wrk(
    url: str, key: str | None, connections: int, duration: int, body: str = BODY, headers: dict[str, str] | None = None
) -> WrkResult:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write('wrk.method = "POST"\n')
        f.write(f"wrk.body = [[{body}]]\n")
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        if key:
            f.write(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
        for name, value in (headers or {}).items():
            f.write(f'wrk.headers["{name}"] = "{value}"\n')
        script = f.name
    threads = 1 if connections == 1 else 2
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency", "-s", script, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(script)
    rps = float(_found(r"Requests/sec:\s+([\d.]+)", out))
    total = int(_found(r"(\d+) requests in", out))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    p50 = _ms(_found(r"\s50%\s+(\S+)", out))
    p99 = _ms(_found(r"\s99%\s+(\S+)", out))
    return {"rps": rps, "p50": p50, "p99": p99, "requests": total, "errors": int(errors.group(1)) if errors else 0}


class Route(NamedTuple):
    """One kind of request the cross-protocol rows send: a label, a gateway path, a body and its headers."""

    label: str
    path: str
    body: str
    headers: dict[str, str]


def _raw_request(host: str, route: Route) -> bytes:
    body = route.body.encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in route.headers.items())
    head = f"POST {route.path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


# A stream not read to its end within this long ends the benchmark with a message instead of a hang.
STREAM_TIMEOUT = 30


async def _one_stream(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[float, float]:
    """(ms to the first read holding an SSE `data:` line, ms to the first read holding content) of one
    streaming request on a keep-alive connection, read to its end. On the Anthropic shape the first event is
    `message_start`, which carries no text; the first content is what a user sees."""
    t0 = time.perf_counter()
    writer.write(request)
    await writer.drain()
    first_event = first_content = None
    buf = b""
    try:
        async with asyncio.timeout(STREAM_TIMEOUT):
            while not buf.endswith(b"\r\n0\r\n\r\n"):  # the end of the chunked response
                chunk = await reader.read(65536)
                if not chunk:
                    raise SystemExit("connection closed")
                now = time.perf_counter()
                buf += chunk
                if first_event is None and b"data: " in buf:
                    first_event = (now - t0) * 1000
                if first_content is None and FIRST_CONTENT.search(buf):
                    first_content = (now - t0) * 1000
    except TimeoutError:
        raise SystemExit(f"a stream not ended after {STREAM_TIMEOUT} s: {buf[:600]!r}") from None
    if first_event is None or first_content is None:
        raise SystemExit(f"a stream without content: {buf[:600]!r}")
    return first_event, first_content


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def ttfb(url: str, route: Route, n: int) -> float:
    """Median ms to the first SSE event of `n` sequential streams over one connection, raw sockets; the
    first tenth is dropped (warm-up)."""
    host, port = _host_port(url)

    async def run() -> list[float]:
        reader, writer = await asyncio.open_connection(host, port)
        request = _raw_request(host, route)
        samples = [(await _one_stream(reader, writer, request))[0] for _ in range(n)]
        writer.close()
        return samples

    samples = asyncio.run(run())
    return statistics.median(samples[n // 10 :])


class Ttfb(TypedDict):
    event_p50: float
    event_p90: float
    content_p50: float
    content_p90: float
    samples: int
    cpu_ms: float  # CPU time per stream of the server's process (nan without its pid)


def ttfb_interleaved(
    targets: list[tuple[str, Route]], per_slice: int, slices: int, pids: dict[str, int] | None = None
) -> dict[str, Ttfb]:
    """Streaming TTFB of each (server URL, route), `slices` slices of `per_slice` sequential streams each, in
    rotating order (ABC, BCA, CAB, ...) so that drift on a shared machine affects every route alike; one
    keep-alive connection per route; a first round of slices is a warm-up and not counted. `pids`: the
    server process of a route's label, whose CPU time per stream is counted over the same slices."""
    hosts = {route.label: _host_port(url) for url, route in targets}
    routes = [route for _, route in targets]
    pids = pids or {}

    async def run() -> tuple[dict[str, list[tuple[float, float]]], dict[str, float]]:
        connections = {label: await asyncio.open_connection(host, port) for label, (host, port) in hosts.items()}
        samples: dict[str, list[tuple[float, float]]] = {r.label: [] for r in routes}
        cpu = dict.fromkeys(samples, 0.0)
        for i in range(slices + 1):
            k = i % len(routes)
            for route in routes[k:] + routes[:k]:
                reader, writer = connections[route.label]
                request = _raw_request(hosts[route.label][0], route)
                pid = pids.get(route.label)
                cpu_before = proc_stats(pid)[0] if pid else 0.0
                got = [await _one_stream(reader, writer, request) for _ in range(per_slice)]
                if i:
                    samples[route.label].extend(got)
                    if pid:
                        cpu[route.label] += proc_stats(pid)[0] - cpu_before
        for _, writer in connections.values():
            writer.close()
        return samples, cpu

    samples, cpu = asyncio.run(run())
    result = {}
    for label, pairs in samples.items():
        events, contents = [e for e, _ in pairs], [c for _, c in pairs]
        result[label] = Ttfb(
            event_p50=statistics.median(events),
            event_p90=statistics.quantiles(events, n=10)[8],
            content_p50=statistics.median(contents),
            content_p90=statistics.quantiles(contents, n=10)[8],
            samples=len(pairs),
            cpu_ms=cpu[label] / len(pairs) * 1000 if label in pids else float("nan"),
        )
    return result


def rates_interleaved(
    gw_url: str, routes: list[Route], gw_pid: int, connections: int, duration: int
) -> dict[str, Sliced]:
    """wrk on each route, about `duration` seconds each in 2 s slices of rotating order (as `interleaved`
    does), with the gateway's CPU time per request of each."""
    seconds = min(2, duration)
    runs: dict[str, list[Sliced]] = {r.label: [] for r in routes}
    for i in range(max(duration // seconds, 1)):
        k = i % len(routes)
        for route in routes[k:] + routes[:k]:
            cpu_before, _ = proc_stats(gw_pid)
            result = wrk(gw_url + route.path, None, connections, seconds, route.body, route.headers)
            cpu = proc_stats(gw_pid)[0] - cpu_before
            runs[route.label].append({**result, "cpu_us": cpu / max(result["requests"], 1) * 1e6})
    return {label: _sliced(slices) for label, slices in runs.items()}


def cross_protocol_routes(key: str, *, stream: bool) -> list[Route]:
    """OpenAI → OpenAI (the baseline), OpenAI client → Anthropic upstream, Anthropic client → OpenAI upstream."""
    bearer = {"Authorization": f"Bearer {key}"}
    anthropic_client = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    return [
        Route("OpenAI → OpenAI", "/v1/chat/completions", STREAM_BODY if stream else BODY, bearer),
        Route(
            "OpenAI → Anthropic",
            "/v1/chat/completions",
            ANTHROPIC_UPSTREAM_STREAM if stream else ANTHROPIC_UPSTREAM_BODY,
            bearer,
        ),
        Route("Anthropic → OpenAI", "/v1/messages", MESSAGES_STREAM if stream else MESSAGES_BODY, anthropic_client),
    ]


# The simulator's own time to the first event / content, per upstream protocol; and which of them each
# gateway path calls, so that the gateway's own share of a path's TTFB can be told from the simulator's.
DIRECT_OPENAI, DIRECT_ANTHROPIC = "direct OpenAI (simulator)", "direct Anthropic (simulator)"
UPSTREAM_OF = {
    "OpenAI → OpenAI": DIRECT_OPENAI,
    "OpenAI → Anthropic": DIRECT_ANTHROPIC,
    "Anthropic → OpenAI": DIRECT_OPENAI,
}


def direct_stream_routes() -> list[Route]:
    anthropic = {"x-api-key": "sk-bench", "anthropic-version": ANTHROPIC_VERSION}
    return [
        Route(DIRECT_OPENAI, "/openai/v1/chat/completions", STREAM_BODY, {}),
        Route(DIRECT_ANTHROPIC, "/anthro/v1/messages", MESSAGES_STREAM.replace('"gpt-4o"', '"claude-a"'), anthropic),
    ]


def check_routes(gw_url: str, routes: list[Route]) -> None:
    """Each non-streaming route answers 200 in its client's shape from its primary (so wrk measures the
    protocol paths, not errors or a fallback)."""
    for route in routes:
        response = httpx.post(gw_url + route.path, content=route.body, headers=route.headers, timeout=30)
        assert response.status_code == 200, f"{route.label}: {response.status_code} {response.text}"
        shape = "content" if route.path == "/v1/messages" else "choices"
        assert shape in response.json(), f"{route.label}: {response.text}"
        assert "x-vidai-fallback" not in response.headers, f"{route.label}: served by a fallback"


# Paced streams: this many ms between a stream's chunks, as tokens come from a real model; measured in this
# many interleaved slices of this many streams per path.
PACE_MS = 10
PACED_SLICES, PACED_PER_SLICE = 12, 10
# bench/reference_proxy.py's two kinds, measured beside the gateway on the paced streams: the floor under
# the gateway's added time to first byte on this machine.
REFERENCE_PROXIES = {
    "callback": "reference proxy, callbacks only",
    "asgi": "reference proxy, ASGI on the gateway's server protocol and transport",
}


def start_reference_proxies(env: dict[str, str], sim_url: str, procs: list[subprocess.Popen]) -> dict[str, str]:
    """Start bench/reference_proxy.py's two kinds in front of the simulator's OpenAI path; their URLs by kind."""
    urls = {}
    for kind in REFERENCE_PROXIES:
        port = free_port()
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "reference_proxy.py"),
                kind,
                "--port",
                str(port),
                "--upstream",
                f"{sim_url}/openai/v1/chat/completions",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        procs.append(proc)
        urls[kind] = f"http://127.0.0.1:{port}"
        wait_ready(f"{urls[kind]}/readyz", proc)
    return urls


def pace(sim_url: str, chunk_delay_ms: float, provider: str = "openai") -> None:
    """Set the simulator's delay between a stream's chunks for `provider` (0: back to back, the default)."""
    httpx.put(
        f"{sim_url}/_sim/providers/{provider}", json={"chunk_delay_ms": chunk_delay_ms}, timeout=10
    ).raise_for_status()


def zero_first_token(sim_url: str, providers: tuple[str, ...] = ("openai", "backup", "anthro")) -> None:
    """No simulated time to the first token, so TTFB is the gateway's own work (the default; set explicitly)."""
    for name in providers:
        httpx.put(f"{sim_url}/_sim/providers/{name}", json={"first_token_ms": 0}, timeout=10).raise_for_status()


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds used so far, resident MiB) of a process and its children, from /proc.

    For a uvicorn supervisor with several workers: the CPU of all of them, and the largest worker's RSS.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    kids = _children(pid)
    cpu = 0.0
    for one in [pid, *kids]:
        fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        cpu += (int(fields[11]) + int(fields[12])) / ticks
    rss = max(_rss(one) for one in kids or [pid])
    return cpu, rss


def _rss(pid: int) -> float:
    return (
        next(
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        / 1024
    )


def _children(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(kid) for kid in children.read_text().split()] if children.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--memory", action="store_true", help="memory breaker and SQLite log writes (no Redis)")
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes (several need Redis)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    concurrencies = [int(c) for c in args.connections.split(",")]

    work = Path(tempfile.mkdtemp(prefix="cp-bench-"))
    sim_port, gw_port = free_port(), free_port()
    sim_url, gw_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gw_port}"
    namespace = f"bench:{uuid.uuid4().hex[:8]}"
    env = stack_env(work, "" if args.memory else args.redis_url, namespace)
    key = prepare(env, sim_url)
    procs: list[subprocess.Popen] = []
    try:
        gw_pid = start_stack(env, sim_port=sim_port, gw_port=gw_port, procs=procs, workers=args.workers)
        reference_urls = start_reference_proxies(env, sim_url, procs)

        rows: list[tuple[int, WrkResult, Failover]] = []
        direct_url = f"{sim_url}/openai/v1/chat/completions"
        gateway_url = f"{gw_url}/v1/chat/completions"
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        for body in (FALLBACK_BODY, RESILIENT_BODY):
            open_circuit(gateway_url, headers, body)
        wrk(gateway_url, key, 16, 2)  # warm up connection pools and caches
        wrk(gateway_url, key, 16, 2, FALLBACK_BODY)
        wrk(gateway_url, key, 16, 2, RESILIENT_BODY)
        gateway_requests, gateway_cpu = 0, 0.0
        fallback_rows: list[tuple[int, Failover, Failover]] = []
        for c in concurrencies:
            direct = wrk(direct_url, None, c, args.duration)
            # Healthy, default failover and policy-on failover in alternating slices, so that drift on a shared
            # machine affects all three alike and "share of healthy" compares like with like.
            through, default, resilient = interleaved(sim_url, gateway_url, key, gw_pid, c, args.duration)
            gateway_requests += through["requests"]
            gateway_cpu += through["cpu_us"] * through["requests"]  # CPU per request counts healthy runs only
            fallback_rows.append((c, default, resilient))
            rows.append((c, direct, through))
        _, rss = proc_stats(gw_pid)

        zero_first_token(sim_url)
        plain = cross_protocol_routes(key, stream=False)
        check_routes(gw_url, plain)
        for route in plain:
            wrk(gw_url + route.path, None, 16, 1, route.body, route.headers)  # warm up
        protocol_rates = rates_interleaved(gw_url, plain, gw_pid, 16, args.duration)

        n = 400
        direct_stream = Route("direct", "/backup/v1/chat/completions", STREAM_BODY, {})
        ttfb_direct = ttfb(sim_url, direct_stream, n)
        per_slice, slices = 100, 8
        streams = cross_protocol_routes(key, stream=True)
        targets = [(gw_url, r) for r in streams] + [(sim_url, r) for r in direct_stream_routes()]
        protocol_ttfb = ttfb_interleaved(targets, per_slice, slices)
        ttfb_gateway = protocol_ttfb[streams[0].label]["event_p50"]
        # The same OpenAI path with the chunks PACE_MS apart: between chunks the worker sleeps, so every stream
        # starts on a worker that has just woken, as on a real upstream (the peer harness's mock does the same).
        pace(sim_url, PACE_MS)
        paced_targets = [
            (gw_url, streams[0]),
            *((reference_urls[kind], streams[0]._replace(label=label)) for kind, label in REFERENCE_PROXIES.items()),
            (sim_url, direct_stream_routes()[0]),
        ]
        paced = ttfb_interleaved(paced_targets, PACED_PER_SLICE, PACED_SLICES)
        pace(sim_url, 0)
        _, rss_end = proc_stats(gw_pid)
        scrape_ms, counted = scrape_metrics(gw_url)
    finally:
        stop_stack(procs, args.redis_url, namespace, work)

    mode = (
        "embedded (memory breaker, SQLite log writes)" if args.memory else "production (Redis breaker and log stream)"
    )
    workers = "one gateway worker" if args.workers == 1 else f"{args.workers} gateway workers"
    cpu_us = gateway_cpu / max(gateway_requests, 1)
    print(f"\nGateway benchmark — {os.cpu_count()} cores, wrk {args.duration}s per run, {workers}, {mode}")
    print(f"Machine: {machine_note()}\n")
    print_summary(rows, fallback_rows, cpu_us=cpu_us, rss=max(rss, rss_end), ttfb_added=ttfb_gateway - ttfb_direct)
    print("\nAll rows:\n")
    print(
        "| concurrency | direct req/s | gateway req/s | direct p50 ms | gateway p50 ms | added p50 ms "
        "| direct p99 ms | gateway p99 ms | gateway CPU µs/req | gateway non-2xx |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, d, g in rows:
        print(
            f"| {c} | {d['rps']:,.0f} | {g['rps']:,.0f} | {d['p50']:.2f} | {g['p50']:.2f} | "
            f"{g['p50'] - d['p50']:.2f} | {d['p99']:.2f} | {g['p99']:.2f} | {g['cpu_us']:.0f} | {g['errors']} |"
        )
    print("\nPrimary failing, circuit open, served by the chain's first entry:\n")
    print(
        "| concurrency | policy | gateway req/s | p50 ms | p99 ms | share of healthy req/s "
        "| policy on / default | CPU µs/req | non-2xx | primary calls |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    healthy = {c: g["rps"] for c, _, g in rows}
    for c, default, resilient in fallback_rows:
        for label, f in (("default", default), ("on", resilient)):
            ratio = f"{resilient['rps'] / default['rps']:.1%}" if f is resilient else ""
            print(
                f"| {c} | {label} | {f['rps']:,.0f} | {f['p50']:.2f} | {f['p99']:.2f} | {f['rps'] / healthy[c]:.0%} "
                f"| {ratio} | {f['cpu_us']:.0f} | {f['errors']} | {f['primary_calls']} |"
            )
    print(
        f"\nStreaming time to first byte (to the first SSE event; median of {n} direct, sequential, and of "
        f"{per_slice * slices} interleaved through the gateway): direct {ttfb_direct:.2f} ms, "
        f"gateway {ttfb_gateway:.2f} ms, added {ttfb_gateway - ttfb_direct:.2f} ms"
    )
    paced_gw, paced_direct = paced[streams[0].label]["event_p50"], paced[DIRECT_OPENAI]["event_p50"]
    floors = ", ".join(
        f"{label} {paced[label]['event_p50'] - paced_direct:.2f} ms" for label in REFERENCE_PROXIES.values()
    )
    print(
        f"Paced streams ({PACE_MS} ms between chunks; {PACED_PER_SLICE * PACED_SLICES} per path in {PACED_SLICES} "
        f"interleaved slices): direct "
        f"{paced_direct:.2f} ms, gateway {paced_gw:.2f} ms, added {paced_gw - paced_direct:.2f} ms; "
        f"added by bench/reference_proxy.py on the same streams: {floors}"
    )
    print(f"Gateway resident memory: {rss:.0f} MiB after the healthy runs, {rss_end:.0f} MiB at the end")
    print(f"Gateway CPU time per request: {cpu_us:.0f} µs ({gateway_requests:,} requests)")
    print(f"/metrics: answered in {scrape_ms:.1f} ms, counting {counted:,.0f} chat requests")
    print_cross_protocol(protocol_ttfb, protocol_rates, per_slice=per_slice, slices=slices)


def print_summary(
    rows: list[tuple[int, WrkResult, Failover]],
    fallback_rows: list[tuple[int, Failover, Failover]],
    *,
    cpu_us: float,
    rss: float,
    ttfb_added: float,
) -> None:
    """The headline table: the simulator called directly (the limit) and through the gateway."""
    by_c = {c: (d, g) for c, d, g in rows}
    cs = sorted(by_c)
    failover = {c: default["rps"] / by_c[c][1]["rps"] for c, default, _ in fallback_rows}
    head = " | ".join(f"req/s c={c}" for c in cs)
    print(
        f"| target | {head} | added p50 c={cs[0]} ms | CPU ms / request | RSS MiB "
        f"| failover req/s vs own healthy ({'/'.join(f'c={c}' for c in cs)}) | added streaming TTFB ms |"
    )
    print("|---|" + "---:|" * (len(cs) + 5))
    direct = " | ".join(f"{by_c[c][0]['rps']:,.0f}" for c in cs)
    print(f"| simulator, direct | {direct} | – | – | – | – | – |")
    through = " | ".join(f"{by_c[c][1]['rps']:,.0f}" for c in cs)
    added = by_c[cs[0]][1]["p50"] - by_c[cs[0]][0]["p50"]
    ratios = " / ".join(f"{failover[c]:.2f}×" for c in cs)
    print(f"| this gateway | {through} | {added:.2f} | {cpu_us / 1000:.2f} | {rss:.0f} | {ratios} | {ttfb_added:.2f} |")


def print_cross_protocol(streams: dict[str, Ttfb], rates: dict[str, Sliced], *, per_slice: int, slices: int) -> None:
    """The cross-protocol rows (issue 11), each against the first (same-protocol) one of the same run."""
    print(
        f"\nCross-protocol streaming (issue 11), {per_slice * slices} streams per path in {slices} interleaved "
        f"slices of {per_slice}, simulator first_token_ms 0. 'first event': ms from writing the request to the "
        "first read holding an SSE `data:` line (what the line above measures; on the Anthropic shape that is "
        "message_start). 'first content': to the first read holding text (OpenAI: a delta with non-empty "
        "`content`; Anthropic: a `content_block_delta`).\n"
    )
    print(
        "| client → upstream | first event p50 ms | p90 | first content p50 ms | p90 "
        "| added p50 (event) ms | added p50 (content) ms | gateway's own p50 (content) ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = next(iter(streams.values()))
    for label, t in streams.items():
        added = (
            f"{t['event_p50'] - base['event_p50']:+.3f} | {t['content_p50'] - base['content_p50']:+.3f}"
            if label in UPSTREAM_OF
            else " | "
        )
        own = f"{t['content_p50'] - streams[UPSTREAM_OF[label]]['content_p50']:.3f}" if label in UPSTREAM_OF else ""
        print(
            f"| {label} | {t['event_p50']:.3f} | {t['event_p90']:.3f} | {t['content_p50']:.3f} | "
            f"{t['content_p90']:.3f} | {added} | {own} |"
        )
    print(
        "\n'added': against OpenAI → OpenAI; 'gateway's own': the path's first content minus the simulator's on "
        "the upstream protocol it calls (direct rows)."
    )
    print("\nNon-streaming at concurrency 16, 2 s slices in rotating order:\n")
    print("| client → upstream | req/s | share of OpenAI → OpenAI | p50 ms | p99 ms | CPU µs/req | non-2xx |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    first = next(iter(rates.values()))
    for label, r in rates.items():
        print(
            f"| {label} | {r['rps']:,.0f} | {r['rps'] / first['rps']:.0%} | {r['p50']:.2f} | {r['p99']:.2f} | "
            f"{r['cpu_us']:.0f} | {r['errors']} |"
        )


class Sliced(WrkResult):
    cpu_us: float


class Failover(Sliced):
    primary_calls: int


def interleaved(
    sim_url: str, gateway_url: str, key: str, gw_pid: int, connections: int, duration: int
) -> tuple[Failover, Failover, Failover]:
    """The healthy model, the default failover and the failover with the policy on, about `duration` seconds
    each, in 2 s slices whose order reverses every round (ABC CBA ABC ...).

    A shared machine's load drifts within seconds; alternating slices give the three rows the same drift, which
    back-to-back runs do not. req/s is the slices' mean (equal lengths), p50 their median, p99 their worst.
    """
    seconds = min(2, duration)
    bodies = (BODY, FALLBACK_BODY, RESILIENT_BODY)
    runs: dict[str, list[Failover]] = {body: [] for body in bodies}
    for i in range(max(duration // seconds, 1)):
        for body in bodies if i % 2 == 0 else bodies[::-1]:
            runs[body].append(failover(sim_url, gateway_url, key, gw_pid, connections, seconds, body))
    healthy, default, resilient = (_merged(runs[body]) for body in bodies)
    return healthy, default, resilient


def failover(
    sim_url: str, gateway_url: str, key: str, gw_pid: int, connections: int, duration: int, body: str
) -> Failover:
    """A wrk run (against a model whose primary fails, or the healthy one), with the calls the failing
    provider saw meanwhile.

    The runs go one after another and only they call the failing provider, so the difference of its
    counter is this run's: 0 while its circuit stays open, a few if a cooldown ends and probes go out.
    The gateway's CPU time per request is the steadier figure on a shared machine: req/s moves with
    whatever else runs, CPU per request much less.
    """
    before = primary_calls(sim_url)
    cpu_before, _ = proc_stats(gw_pid)
    result = wrk(gateway_url, key, connections, duration, body)
    cpu = proc_stats(gw_pid)[0] - cpu_before
    per_request = cpu / max(result["requests"], 1) * 1e6
    return {**result, "primary_calls": primary_calls(sim_url) - before, "cpu_us": per_request}


def _merged(runs: list[Failover]) -> Failover:
    return {**_sliced(list(runs)), "primary_calls": sum(r["primary_calls"] for r in runs)}


def _sliced(runs: list[Sliced]) -> Sliced:
    """Slices of one series as one: req/s their mean (equal lengths), p50 their median, p99 their worst."""
    requests = sum(r["requests"] for r in runs)
    return {
        "rps": statistics.fmean(r["rps"] for r in runs),
        "p50": statistics.median(r["p50"] for r in runs),
        "p99": max(r["p99"] for r in runs),
        "requests": requests,
        "errors": sum(r["errors"] for r in runs),
        "cpu_us": sum(r["cpu_us"] * r["requests"] for r in runs) / max(requests, 1),
    }


def primary_calls(sim_url: str) -> int:
    """Calls the simulator's always-failing provider has answered so far."""
    state = httpx.get(f"{sim_url}/_sim/state", timeout=10).json()
    calls: int = (state.get("fail-503") or {}).get("requests", 0)
    return calls


def open_circuit(gateway_url: str, headers: dict[str, str], body: str) -> None:
    """Fail `body`'s primary until its circuit opens (5 failures among at least 10 requests), then check."""
    for _ in range(12):
        httpx.post(gateway_url, content=body, headers=headers)
    check = httpx.post(gateway_url, content=body, headers=headers)
    assert check.headers.get("x-vidai-fallback") == "true", "circuit did not open"
    assert check.headers.get("x-vidai-attempts", "1") == "1", "the open primary was called"


def scrape_metrics(url: str) -> tuple[float, float]:
    """(milliseconds one /metrics scrape took, chat requests it counts); (nan, nan) for a gateway without it."""
    from prometheus_client.parser import text_string_to_metric_families

    t0 = time.perf_counter()
    response = httpx.get(f"{url}/metrics", timeout=30)
    elapsed = (time.perf_counter() - t0) * 1000
    if response.status_code != 200 or "controlplane_gateway_requests" not in response.text:
        return float("nan"), float("nan")
    counted = sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        if family.name == "controlplane_gateway_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    )
    return elapsed, counted


def _worker_pid(parent: int, workers: int) -> int:
    """run_gateway with one worker serves in its own process (no child): that one. With several, the
    supervisor, whose children are the workers (proc_stats counts them all)."""
    if workers > 1:
        return parent
    kids = _children(parent)
    return kids[0] if kids else parent


if __name__ == "__main__":
    main()
