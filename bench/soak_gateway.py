"""Soak: one production-mode gateway worker under constant load, its memory sampled as it goes.

Starts the same stack as bench/gateway.py (the simulator and one `run_gateway` worker with the Redis-backed
breaker and request-log stream), warms it up, then drives it with wrk at one concurrency for `--minutes` in
slices of `--slice` seconds and prints, after each slice, req/s, CPU per request and the worker's RSS. The
last line says how RSS moved from the first slice to the last. Nothing ingests the request-log stream here,
so it is capped at 200,000 entries (Redis memory stays bounded) and the gateway reports the trimming, as it
would in production with its ingest workers down.

    .venv/bin/python bench/soak_gateway.py [--minutes 5] [--connections 64] [--slice 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import free_port, prepare, proc_stats, stack_env, start_stack, stop_stack, wrk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--slice", type=int, default=30, help="seconds per wrk run between memory samples")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")

    work = Path(tempfile.mkdtemp(prefix="cp-soak-"))
    sim_port, gw_port = free_port(), free_port()
    namespace = f"soak:{uuid.uuid4().hex[:8]}"
    env = {**stack_env(work, args.redis_url, namespace), "REQUEST_LOG_STREAM_MAXLEN": "200000"}
    key = prepare(env, f"http://127.0.0.1:{sim_port}")
    procs: list[subprocess.Popen[bytes]] = []
    rows: list[tuple[float, float, float, float]] = []
    try:
        pid = start_stack(env, sim_port=sim_port, gw_port=gw_port, procs=procs)
        url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
        wrk(url, key, args.connections, 10)  # warm up: pools, caches, the allocator's first arenas
        slices = max(int(args.minutes * 60 // args.slice), 2)
        for i in range(slices):
            cpu_before, _ = proc_stats(pid)
            result = wrk(url, key, args.connections, args.slice)
            cpu_after, rss = proc_stats(pid)
            cpu_us = (cpu_after - cpu_before) / max(result["requests"], 1) * 1e6
            rows.append(((i + 1) * args.slice, result["rps"], cpu_us, rss))
            print(f"{(i + 1) * args.slice:>5} s  {result['rps']:>7,.0f} req/s  {cpu_us:>4.0f} µs/req  {rss:.1f} MiB")
    finally:
        stop_stack(procs, args.redis_url, namespace, work)

    first, last, peak = rows[0][3], rows[-1][3], max(r[3] for r in rows)
    total = sum(r[1] * args.slice for r in rows)
    print(
        f"\nSoak at c={args.connections}: {len(rows) * args.slice} s, {total:,.0f} requests; RSS {first:.1f} MiB "
        f"after the first slice, {last:.1f} MiB after the last ({(last - first) / first:+.1%}), peak {peak:.1f}"
    )


if __name__ == "__main__":
    main()
