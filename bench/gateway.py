"""Gateway benchmark: the gateway against the same simulator called directly.

Starts the simulator and ONE gateway worker process (`manage.py run_gateway`,
production mode: Redis-backed breaker, request logs to a Redis stream, config
from a SQLite file this script prepares), drives both with wrk (C, so the load
generator is not the bottleneck), and prints requests/s and p50/p99 latency at
concurrency 1, 16 and 64, the same with the primary failing and fallback serving
(the chain's resilience policy off, the default, and on, in alternating slices),
streaming time to first byte, resident memory and CPU time per request.

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
from typing import TypedDict

import httpx

ROOT = Path(__file__).resolve().parents[1]
BODY = '{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello in five words."}]}'
# gpt-4o-b's provider always answers 503: once its circuit is open, its chain serves (fallback runs).
FALLBACK_BODY = BODY.replace('"gpt-4o"', '"gpt-4o-b"')
# gpt-4o-r is on the same failing provider, but its chain has the resilience policy on: the same failover
# through the attempt loop and its planner, so the two rows differ by the policy's cost only.
RESILIENT_BODY = BODY.replace('"gpt-4o"', '"gpt-4o-r"')
STREAM_BODY = '{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Say hello."}]}'


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
LlmModel.objects.create(name="gpt-4o", provider=openai, input_price_per_mtok=Decimal("2.5"), output_price_per_mtok=10)
LlmModel.objects.create(name="claude", provider=backup, input_price_per_mtok=Decimal("3"), output_price_per_mtok=15)
LlmModel.objects.create(name="gpt-4o-b", provider=broken, input_price_per_mtok=Decimal("2.5"), output_price_per_mtok=10)
LlmModel.objects.create(name="gpt-4o-r", provider=broken, input_price_per_mtok=Decimal("2.5"), output_price_per_mtok=10)
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


def start_stack(env: dict[str, str], *, sim_port: int, gw_port: int, procs: list[subprocess.Popen]) -> int:
    """Start the simulator and one `run_gateway` worker, wait until both answer; returns the worker's pid.

    Started processes are appended to `procs` as they start, so the caller's cleanup stops them even
    when a later step fails.
    """
    sim = subprocess.Popen(
        [sys.executable, "manage.py", "run_simulator", "--port", str(sim_port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    procs.append(sim)
    wait_ready(f"http://127.0.0.1:{sim_port}/_sim/state", sim)
    gw = subprocess.Popen(
        [sys.executable, "manage.py", "run_gateway", "--port", str(gw_port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    procs.append(gw)
    wait_ready(f"http://127.0.0.1:{gw_port}/readyz", gw)
    return _worker_pid(gw.pid)


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


def wrk(url: str, key: str | None, connections: int, duration: int, body: str = BODY) -> WrkResult:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write('wrk.method = "POST"\n')
        f.write(f"wrk.body = [[{body}]]\n")
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        if key:
            f.write(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
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


async def _ttfb(host: str, port: int, path: str, key: str | None, n: int) -> list[float]:
    """Time to the first SSE data bytes over one keep-alive connection, raw sockets."""
    reader, writer = await asyncio.open_connection(host, port)
    body = STREAM_BODY.encode()
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        writer.write(request)
        await writer.drain()
        first = True
        buf = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                raise SystemExit("connection closed")
            if first and b"data: " in chunk:
                samples.append((time.perf_counter() - t0) * 1000)
                first = False
            buf += chunk
            if buf.endswith(b"0\r\n\r\n"):  # end of the chunked response
                break
    writer.close()
    return samples


def ttfb(url: str, path: str, key: str | None, n: int) -> float:
    host, port = url.removeprefix("http://").split(":")
    samples = asyncio.run(_ttfb(host, int(port), path, key, n))
    return statistics.median(samples[n // 10 :])  # drop warm-up


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds used so far, resident MiB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = (
        next(
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        / 1024
    )
    return cpu, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--memory", action="store_true", help="memory breaker and SQLite log writes (no Redis)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    concurrencies = [int(c) for c in args.connections.split(",")]

    work = Path(tempfile.mkdtemp(prefix="cp-bench-"))
    sim_port, gw_port = free_port(), free_port()
    sim_url, gw_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gw_port}"
    namespace = f"bench:{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"sqlite:///{work / 'bench.sqlite3'}",
        "REDIS_URL": "" if args.memory else args.redis_url,
        "SECRET_KEY": "bench-" + uuid.uuid4().hex,
        "BREAKER_REDIS_NAMESPACE": namespace,
        "CONTROLPLANE_VAR_DIR": str(work),
        "LOG_LEVEL": "WARNING",
    }
    key = prepare(env, sim_url)
    procs: list[subprocess.Popen] = []
    try:
        gw_pid = start_stack(env, sim_port=sim_port, gw_port=gw_port, procs=procs)

        rows = []
        direct_url = f"{sim_url}/openai/v1/chat/completions"
        gateway_url = f"{gw_url}/v1/chat/completions"
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        for body in (FALLBACK_BODY, RESILIENT_BODY):
            open_circuit(gateway_url, headers, body)
        wrk(gateway_url, key, 16, 2)  # warm up connection pools and caches
        wrk(gateway_url, key, 16, 2, FALLBACK_BODY)
        wrk(gateway_url, key, 16, 2, RESILIENT_BODY)
        cpu_before, _ = proc_stats(gw_pid)
        gateway_requests = 0
        fallback_rows: list[tuple[int, Failover, Failover]] = []
        # Interleaved per concurrency, so drift on a shared machine affects all four alike.
        for c in concurrencies:
            direct = wrk(direct_url, None, c, args.duration)
            through = wrk(gateway_url, key, c, args.duration)
            gateway_requests += through["requests"]
            cpu_mid, _ = proc_stats(gw_pid)
            default, resilient = failover_pair(sim_url, gateway_url, key, gw_pid, c, args.duration)
            fallback_rows.append((c, default, resilient))
            cpu_before += proc_stats(gw_pid)[0] - cpu_mid  # CPU per request counts healthy runs only
            rows.append((c, direct, through))
        cpu_after, rss = proc_stats(gw_pid)

        n = 400
        ttfb_direct = ttfb(sim_url, "/backup/v1/chat/completions", None, n)
        ttfb_gateway = ttfb(gw_url, "/v1/chat/completions", key, n)
        _, rss_end = proc_stats(gw_pid)
        scrape_ms, counted = scrape_metrics(gw_url)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        import redis

        client = redis.Redis.from_url(args.redis_url)
        for k in client.scan_iter(f"{namespace}*"):
            client.delete(k)
        client.delete("cp:requestlogs")
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nGateway benchmark — {os.cpu_count()} cores, wrk {args.duration}s per run, one gateway worker\n")
    print(
        "| concurrency | direct req/s | gateway req/s | direct p50 ms | gateway p50 ms | added p50 ms "
        "| direct p99 ms | gateway p99 ms | gateway non-2xx |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, d, g in rows:
        print(
            f"| {c} | {d['rps']:,.0f} | {g['rps']:,.0f} | {d['p50']:.2f} | {g['p50']:.2f} | "
            f"{g['p50'] - d['p50']:.2f} | {d['p99']:.2f} | {g['p99']:.2f} | {g['errors']} |"
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
        f"\nStreaming time to first byte (median of {n}, sequential): direct {ttfb_direct:.2f} ms, "
        f"gateway {ttfb_gateway:.2f} ms, added {ttfb_gateway - ttfb_direct:.2f} ms"
    )
    print(f"Gateway resident memory: {rss:.0f} MiB after the healthy runs, {rss_end:.0f} MiB at the end")
    print(
        f"Gateway CPU time per request: {(cpu_after - cpu_before) / max(gateway_requests, 1) * 1e6:.0f} µs "
        f"({gateway_requests:,} requests)"
    )
    print(f"/metrics: answered in {scrape_ms:.1f} ms, counting {counted:,.0f} chat requests")


class Failover(WrkResult):
    primary_calls: int
    cpu_us: float


def failover_pair(
    sim_url: str, gateway_url: str, key: str, gw_pid: int, connections: int, duration: int
) -> tuple[Failover, Failover]:
    """The default failover and the same with the policy on, about `duration` seconds each, in 2 s slices
    of alternating order (AB BA AB ...).

    A shared machine's load drifts within seconds; alternating slices give both rows the same drift, which
    two back-to-back runs do not. req/s is the slices' mean (equal lengths), p50 their median, p99 their worst.
    """
    seconds = min(2, duration)
    runs: dict[str, list[Failover]] = {FALLBACK_BODY: [], RESILIENT_BODY: []}
    for i in range(max(duration // seconds, 1)):
        order = (FALLBACK_BODY, RESILIENT_BODY) if i % 2 == 0 else (RESILIENT_BODY, FALLBACK_BODY)
        for body in order:
            runs[body].append(failover(sim_url, gateway_url, key, gw_pid, connections, seconds, body))
    return _merged(runs[FALLBACK_BODY]), _merged(runs[RESILIENT_BODY])


def failover(
    sim_url: str, gateway_url: str, key: str, gw_pid: int, connections: int, duration: int, body: str
) -> Failover:
    """A wrk run against a model whose primary fails, with the calls its primary saw meanwhile.

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
    requests = sum(r["requests"] for r in runs)
    return {
        "rps": statistics.fmean(r["rps"] for r in runs),
        "p50": statistics.median(r["p50"] for r in runs),
        "p99": max(r["p99"] for r in runs),
        "requests": requests,
        "errors": sum(r["errors"] for r in runs),
        "primary_calls": sum(r["primary_calls"] for r in runs),
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


def _worker_pid(parent: int) -> int:
    """run_gateway with one worker serves in its own process (no child); with several, pick the first child."""
    children = Path(f"/proc/{parent}/task/{parent}/children")
    kids = children.read_text().split() if children.exists() else []
    return int(kids[0]) if kids else parent


if __name__ == "__main__":
    main()
