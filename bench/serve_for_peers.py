"""Serve one production-mode gateway for a side-by-side run against other gateways on one mock upstream.

Prepares a SQLite catalog whose providers point at the mock (`--upstream`, default http://127.0.0.1:18080):

- `bench-chat` on `/ok/v1` (healthy),
- `bench-failover` on `/fail503/v1` (always 503) with a chain to `bench-backup` on `/ok-fb/v1`,
- `bench-stream` on `/stream/v1` (SSE),

then starts `run_gateway` (Redis-backed breaker and request-log stream, `--workers` processes) on `--port`,
prints the gateway key, the pid to measure and the URL, and serves until interrupted.

    .venv/bin/python bench/serve_for_peers.py [--port 8000] [--workers 1] [--upstream http://127.0.0.1:18080]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import ROOT, _worker_pid, stack_env, stop_stack, wait_ready

CATALOG = """
from django.contrib.auth import get_user_model
from catalog.models import LlmModel, Provider
from catalog.services import api_key_create
from chains.services import ChainInput, EntryInput, chain_create
def provider(name, path):
    return Provider.objects.create(name=name, base_url="{upstream}" + path, api_key="sk-mock-upstream")
LlmModel.objects.create(name="bench-chat", provider=provider("ok", "/ok/v1"))
LlmModel.objects.create(name="bench-failover", provider=provider("fail503", "/fail503/v1"))
LlmModel.objects.create(name="bench-backup", provider=provider("ok-fb", "/ok-fb/v1"))
LlmModel.objects.create(name="bench-stream", provider=provider("stream", "/stream/v1"))
chain_create(actor=None, data=ChainInput(name="failover", source_model="bench-failover",
                                         entries=[EntryInput("bench-backup")]))
user = get_user_model().objects.create_user("bench")
print(api_key_create(actor=None, name="bench", user=user).secret)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--upstream", default="http://127.0.0.1:18080")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="cp-peers-"))
    namespace = f"peers:{uuid.uuid4().hex[:8]}"
    env = stack_env(work, args.redis_url, namespace)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", CATALOG.format(upstream=args.upstream.rstrip("/"))],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    key = out.stdout.strip().splitlines()[-1]
    gateway = subprocess.Popen(
        [sys.executable, "manage.py", "run_gateway", "--port", str(args.port), "--workers", str(args.workers)],
        cwd=ROOT,
        env=env,
    )
    # SIGTERM (kill, pkill) and SIGINT stop it like Ctrl-C: the gateway, its Redis keys and its files go with it.
    # SIGINT is set here too because a shell script's background job starts with SIGINT ignored, and Python
    # then installs no Ctrl-C handler of its own: `kill -INT` would do nothing.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    try:
        wait_ready(f"http://127.0.0.1:{args.port}/readyz", gateway)
        print(f"BENCH_EXTRA_URL=http://127.0.0.1:{args.port}", flush=True)
        print(f"BENCH_EXTRA_API_KEY={key}", flush=True)
        print(f"BENCH_EXTRA_PID={_worker_pid(gateway.pid, args.workers)}", flush=True)
        gateway.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_stack([gateway], args.redis_url, namespace, work)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
