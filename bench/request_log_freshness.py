"""How long after its response a request shows up on the Request Logs page, in both deployments.

Embedded: `manage.py run_embedded` (SQLite; the gateway's in-process writer flushes every 0.5 s).
Production: `run_gateway` (log sink → Redis stream), a Celery worker with beat (`requestlogs.ingest`
every second) and the console under uvicorn, all on PostgreSQL + Redis. For each of N requests sent one
by one through the gateway, the script polls the console's API (`GET /api/request-logs/<id>/`, the
page's own selector) every 10 ms from the moment the response arrived until the request is there.

    .venv/bin/python bench/request_log_freshness.py [--requests 40] [--mode embedded|production|both]

Needs PostgreSQL and Redis for the production half (BENCH_DATABASE_URL's server, BENCH_REDIS_URL).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gateway import free_port, wait_ready  # noqa: E402

PG_SERVER = os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/controlplane_bench").rsplit("/", 1)[0]
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello"}]}


def manage(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout


@contextlib.contextmanager
def running(commands: list[list[str]], env: dict[str, str]) -> Iterator[list[subprocess.Popen]]:
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for cmd in commands
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)


def prepare(env: dict[str, str]) -> tuple[str, str]:
    """Migrate, load the demo data, issue a console token; returns (gateway key, console token)."""
    manage(env, "migrate", "--noinput", "-v0")
    manage(env, "seed_demo")
    key = (Path(env["CONTROLPLANE_VAR_DIR"]) / "demo_gateway_key").read_text().strip()
    token = manage(env, "create_api_token", "admin", "--name", "freshness").split()[-1]
    return key, token


def measure(gateway: str, console: str, key: str, token: str, n: int) -> list[float]:
    samples = []
    with httpx.Client(timeout=10) as client:
        for _ in range(n):
            response = client.post(
                f"{gateway}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {key}"}
            )
            answered = time.perf_counter()
            request_id = response.headers["x-vidai-request-id"]
            while True:
                found = client.get(
                    f"{console}/api/request-logs/{request_id}/", headers={"authorization": f"Token {token}"}
                )
                if found.status_code == 200:
                    samples.append((time.perf_counter() - answered) * 1000)
                    break
                if time.perf_counter() - answered > 30:
                    raise SystemExit(f"{request_id} did not show up within 30 s")
                time.sleep(0.01)
            time.sleep(0.25)  # spread the requests over the flush and beat periods
    return samples


def report(mode: str, samples: list[float]) -> None:
    samples.sort()
    p95 = samples[max(0, round(0.95 * len(samples)) - 1)]
    print(
        f"| {mode} | {len(samples)} | {statistics.median(samples):,.0f} | {p95:,.0f} | {samples[-1]:,.0f} |",
        flush=True,
    )


def embedded(n: int) -> None:
    with tempfile.TemporaryDirectory() as var:
        port, sim_port = free_port(), free_port()
        env = {
            **os.environ,
            "CONTROLPLANE_VAR_DIR": var,
            "DATABASE_URL": "",
            "REDIS_URL": "",
            "SIMULATOR_URL": f"http://127.0.0.1:{sim_port}",
            "ALLOWED_HOSTS": "127.0.0.1",
        }
        key, token = prepare(env)
        cmd = [sys.executable, "manage.py", "run_embedded", "--port", str(port), "--simulator-port", str(sim_port)]
        with running([cmd], env) as procs:
            url = f"http://127.0.0.1:{port}"
            wait_ready(f"{url}/readyz", procs[0])
            report("embedded (SQLite, in-process writer)", measure(url, url, key, token, n))


def production(n: int) -> None:
    import psycopg

    name = f"controlplane_freshness_{uuid.uuid4().hex[:8]}"
    admin_url = PG_SERVER.replace("postgres://", "postgresql://") + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    namespace = f"bench:freshness:{uuid.uuid4().hex}"
    try:
        with tempfile.TemporaryDirectory() as var:
            console_port, gateway_port, sim_port = free_port(), free_port(), free_port()
            env = {
                **os.environ,
                "CONTROLPLANE_VAR_DIR": var,
                "DATABASE_URL": f"{PG_SERVER}/{name}",
                "REDIS_URL": REDIS_URL,
                "SECRET_KEY": secrets.token_urlsafe(50),
                "SIMULATOR_URL": f"http://127.0.0.1:{sim_port}",
                "ALLOWED_HOSTS": "127.0.0.1",
                "SECURE_COOKIES": "false",
                "BREAKER_REDIS_NAMESPACE": namespace,
                "REQUEST_LOG_STREAM": f"{namespace}:requestlogs",
                "CELERY_QUEUE": f"{namespace}:celery",
            }
            key, token = prepare(env)
            py = sys.executable
            commands = [
                [py, "manage.py", "run_simulator", "--port", str(sim_port)],
                [py, "manage.py", "run_gateway", "--port", str(gateway_port)],
                [py, "-m", "uvicorn", "controlplane.asgi:application", "--port", str(console_port),
                 "--log-level", "warning"],
                [py, "-m", "celery", "-A", "controlplane", "worker", "--beat", "--schedule", f"{var}/beat",
                 "--pool=threads", "--concurrency=2", "--loglevel=WARNING"],
            ]  # fmt: skip
            with running(commands, env) as procs:
                gateway, console = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{console_port}"
                wait_ready(f"{gateway}/readyz", procs[1])
                wait_ready(f"{console}/api/request-logs/", procs[2])  # 401 without a token: up
                report("production (PostgreSQL, Redis stream → Celery)", measure(gateway, console, key, token, n))
    finally:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"{namespace}*"))
        if keys:
            client.delete(*keys)
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--mode", choices=["embedded", "production", "both"], default="both")
    args = parser.parse_args()
    print("| mode | requests | median ms | p95 ms | max ms |")
    print("|---|---:|---:|---:|---:|", flush=True)
    if args.mode in ("embedded", "both"):
        embedded(args.requests)
    if args.mode in ("production", "both"):
        production(args.requests)


if __name__ == "__main__":
    main()
