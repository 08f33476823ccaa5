"""Where one proxied request's CPU goes, by stage, in one production-mode gateway worker under load.

Starts the same stack as bench/gateway.py (the simulator and one `run_gateway` worker with the Redis-backed
breaker and request-log stream), drives it with wrk at one concurrency, samples the worker with py-spy
(`--native` off: Python frames only; `--gil`: only the thread holding the GIL, so a thread blocked on a lock
or a socket is not counted as working) and attributes each sample to the innermost frame that belongs to a
stage. The worker's user CPU per request (from /proc) is shared out by those samples; its system CPU (the
kernel's side of every socket call, loopback TCP included) is a row of its own. Prints the table that
docs/performance.md keeps.

    .venv/bin/python bench/profile_gateway.py --duration 20 --connections 16
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import (
    BODY,
    FALLBACK_BODY,
    free_port,
    open_circuit,
    prepare,
    proc_stats,
    stack_env,
    start_stack,
    stop_stack,
    wrk,
)

# (stage, substrings of "function (file)" in py-spy's collapsed frames), most specific first: a sample goes
# to the first stage whose pattern matches its innermost matching frame.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("request-log record and sink", ("_log_record", "logsink.py", "metrics.py", "(gateway/app.py:_log")),
    ("usage parsing", ("_usage_from", "_take_usage")),
    ("attribution headers", ("_attribution", "_attempts (")),
    ("breaker allow / record", ("health/breaker/",)),
    ("upstream request and response", ("gateway/upstream/", "httptools/parser")),
    ("planning (candidates, planner)", ("gateway/resilience.py", "_plan (", "_candidates", "next_action")),
    ("auth, body, routing", ("_authenticate", "_read_body", "_receive_body", "bodies.py", "snapshot.py", "_parse (")),
    ("attempt loop (own code)", ("gateway/attempts.py",)),
    ("gateway dispatch (own code)", ("gateway/app.py", "gateway/exchange.py")),
    ("HTTP server and ASGI (uvicorn)", ("uvicorn/", "gateway/server.py")),
    ("event loop", ("asyncio/", "uvloop")),
]


def stage_of(stack: str) -> str:
    """The stage of one sampled stack; work in a background thread (the breaker's Redis mirror, the log
    sink's shipper) is named apart: off the event loop, but the same process's CPU and GIL."""
    frames = stack.split(";")
    where = "background thread: " if frames[0].startswith("Thread._bootstrap") else ""
    for frame in reversed(frames):  # innermost first
        for stage, patterns in STAGES:
            if any(p in frame for p in patterns):
                return where + stage
    return where + "other (interpreter, libraries outside a stage)"


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds used so far by a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--raw", type=Path, help="also keep py-spy's raw collapsed stacks in this file")
    parser.add_argument(
        "--failover", action="store_true", help="profile the failover path (primary's circuit open, chain serves)"
    )
    args = parser.parse_args()
    for tool in ("wrk", "py-spy"):
        if not shutil.which(tool) and not (Path(sys.executable).parent / tool).exists():
            raise SystemExit(f"{tool} is needed (wrk: apt-get install -y wrk; py-spy: make venv)")
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")

    work = Path(tempfile.mkdtemp(prefix="cp-profile-"))
    sim_port, gw_port = free_port(), free_port()
    namespace = f"profile:{uuid.uuid4().hex[:8]}"
    env = stack_env(work, args.redis_url, namespace)
    key = prepare(env, f"http://127.0.0.1:{sim_port}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        pid = start_stack(env, sim_port=sim_port, gw_port=gw_port, procs=procs)
        url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
        body = BODY
        if args.failover:
            body = FALLBACK_BODY
            open_circuit(url, {"authorization": f"Bearer {key}", "content-type": "application/json"}, body)
        wrk(url, key, args.connections, 3, body)  # warm up
        out = work / "profile.txt"
        sampler = subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(args.rate),
                "--duration",
                str(args.duration),
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
                "--gil",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        user_before, system_before = cpu_split(pid)
        result = wrk(url, key, args.connections, args.duration, body)
        user_after, system_after = cpu_split(pid)
        _, rss = proc_stats(pid)
        sampler.wait(timeout=args.duration + 30)
    finally:
        stop_stack(procs, args.redis_url, namespace, None)  # the profile is read below

    if args.raw:
        shutil.copyfile(out, args.raw)
    samples: collections.Counter[str] = collections.Counter()
    total = 0
    lines = out.read_text().splitlines()
    shutil.rmtree(work, ignore_errors=True)
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or "process_idle" in stack or stack.endswith("select (selectors.py)"):
            continue
        samples[stage_of(stack)] += int(count)
        total += int(count)
    requests = max(result["requests"], 1)
    user_us = (user_after - user_before) / requests * 1e6
    system_us = (system_after - system_before) / requests * 1e6
    print(
        f"c={args.connections}, {args.duration} s: {result['rps']:,.0f} req/s, p50 {result['p50']:.2f} ms, "
        f"worker CPU {user_us + system_us:.0f} µs/request (user {user_us:.0f}, system {system_us:.0f}), "
        f"RSS {rss:.0f} MiB, {total} samples holding the GIL"
    )
    print()
    print("| stage | share of samples holding the GIL | ≈ µs / request |")
    print("|---|---:|---:|")
    for name, hits in samples.most_common():
        share = hits / max(total, 1)
        print(f"| {name} | {share:.1%} | {share * user_us:.0f} |")
    print(f"| kernel (system CPU: socket calls, loopback TCP) | – | {system_us:.0f} |")


if __name__ == "__main__":
    main()
