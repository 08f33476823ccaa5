"""Before and after in one run: the gateway of another revision (the base) beside this tree's, interleaved.

On this shared 2-core machine the same code measures 30% apart an hour later, so a "before" run and an "after"
run made one after the other cannot show a change of a few percent. This starts one simulator, this tree's
`run_gateway` (production mode: Redis-backed breaker and request-log stream) and the base revision's, checked
out into a temporary git worktree, both on the same database and Redis, then measures the two in alternating
slices (A B B A ...), so the machine's drift falls on both alike:

- per concurrency, req/s, p50 and the worker's CPU time per request for the healthy model and for the
  failover model (primary's circuit open, the chain's first entry serving), `--rounds` slices of 2 s each;
- paced streams (the simulator's chunks 10 ms apart, so each stream starts on a worker that has just woken):
  the added time to the first SSE event against the simulator called directly, and CPU time per stream.

The last column of each row is this tree over the base. This tree includes uncommitted changes: that is what
is measured. The database is prepared by this tree's migrations, so the base must read the same schema.

    .venv/bin/python bench/ab_gateway.py [--base HEAD] [--connections 1,16,64] [--rounds 6] [--paced-slices 16]
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
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import (
    BODY,
    FALLBACK_BODY,
    PACE_MS,
    ROOT,
    Sliced,
    _sliced,
    _worker_pid,
    cross_protocol_routes,
    direct_stream_routes,
    failover,
    free_port,
    machine_note,
    open_circuit,
    pace,
    prepare,
    stack_env,
    start_stack,
    stop_stack,
    ttfb_interleaved,
    wait_ready,
    wrk,
    zero_first_token,
)

SLICE_SECONDS = 2
STREAMS_PER_SLICE = 10
DIRECT = "simulator, direct"


class Side(NamedTuple):
    label: str
    url: str
    pid: int


def worktree(base: str, into: Path) -> Path:
    """A detached checkout of `base` under `into` (removed by the caller with `git worktree remove`)."""
    path = into / "base"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--quiet", str(path), base], cwd=ROOT, check=True, capture_output=True
    )
    return path


def start_base(tree: Path, env: dict[str, str], port: int, procs: list[subprocess.Popen]) -> int:
    """The base revision's `run_gateway` (one worker) on `port`; returns the worker's pid."""
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "run_gateway", "--port", str(port), "--workers", "1"],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    procs.append(proc)
    wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
    return _worker_pid(proc.pid, 1)


def rates(sim_url: str, sides: list[Side], key: str, connections: int, body: str, rounds: int) -> dict[str, Sliced]:
    """`rounds` slices of SLICE_SECONDS per side, in the order A B, B A, A B ..., each side's as one."""
    slices: dict[str, list[Sliced]] = {side.label: [] for side in sides}
    for i in range(rounds):
        for side in sides if i % 2 == 0 else sides[::-1]:
            url = f"{side.url}/v1/chat/completions"
            slices[side.label].append(failover(sim_url, url, key, side.pid, connections, SLICE_SECONDS, body))
    return {label: _sliced(runs) for label, runs in slices.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HEAD", help="the revision to compare this tree with")
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--rounds", type=int, default=6, help="2 s slices per side, row and concurrency")
    parser.add_argument("--paced-slices", type=int, default=16, help=f"slices of {STREAMS_PER_SLICE} paced streams")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    base = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()

    work = Path(tempfile.mkdtemp(prefix="cp-ab-"))
    tree = worktree(base, work)
    sim_port, new_port, base_port = free_port(), free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    namespace = f"bench:{uuid.uuid4().hex[:8]}"
    env = stack_env(work, args.redis_url, namespace)
    procs: list[subprocess.Popen] = []
    try:
        key = prepare(env, sim_url)
        new_pid = start_stack(env, sim_port=sim_port, gw_port=new_port, procs=procs)
        base_pid = start_base(tree, env, base_port, procs)
        sides = [
            Side(f"base ({base})", f"http://127.0.0.1:{base_port}", base_pid),
            Side("this tree", f"http://127.0.0.1:{new_port}", new_pid),
        ]
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        zero_first_token(sim_url)
        for side in sides:  # both gateways share the breaker: the first opens the circuit, the second checks it
            open_circuit(f"{side.url}/v1/chat/completions", headers, FALLBACK_BODY)
            for body in (BODY, FALLBACK_BODY):
                wrk(f"{side.url}/v1/chat/completions", key, 16, 1, body)  # warm up pools and caches

        print(f"\nA/B: base {base} against this tree, one worker each, {args.rounds} slices of {SLICE_SECONDS} s")
        print("per side and row, alternating")
        print(f"Machine: {machine_note()}\n")
        print(
            "| concurrency | model | base req/s | this tree req/s | req/s ratio | base p50 ms | this tree p50 ms "
            "| base CPU µs/req | this tree CPU µs/req | CPU ratio |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in (int(x) for x in args.connections.split(",")):
            for model, body in (("healthy", BODY), ("failover", FALLBACK_BODY)):
                got = rates(sim_url, sides, key, c, body, args.rounds)
                b, n = (got[side.label] for side in sides)
                print(
                    f"| {c} | {model} | {b['rps']:,.0f} | {n['rps']:,.0f} | {n['rps'] / b['rps']:.3f} | "
                    f"{b['p50']:.2f} | {n['p50']:.2f} | {b['cpu_us']:.0f} | {n['cpu_us']:.0f} | "
                    f"{n['cpu_us'] / b['cpu_us']:.3f} |",
                    flush=True,
                )

        pace(sim_url, PACE_MS)
        stream = cross_protocol_routes(key, stream=True)[0]
        direct_route = direct_stream_routes()[0]._replace(label=DIRECT)
        targets = [(side.url, stream._replace(label=side.label)) for side in sides] + [(sim_url, direct_route)]
        pids = {side.label: side.pid for side in sides} | {DIRECT: procs[0].pid}
        streams = ttfb_interleaved(targets, STREAMS_PER_SLICE, args.paced_slices, pids)
        direct = streams[DIRECT]["event_p50"]
        print(f"\nPaced streams ({PACE_MS} ms between chunks), {args.paced_slices} slices of {STREAMS_PER_SLICE}")
        print("per target in rotating order\n")
        print("| target | first event p50 ms | added p50 ms | CPU ms per stream |")
        print("|---|---:|---:|---:|")
        for label, first in streams.items():
            added = f"{first['event_p50'] - direct:+.3f}" if label != DIRECT else "–"
            print(f"| {label} | {first['event_p50']:.3f} | {added} | {first['cpu_ms']:.2f} |")
    finally:
        stop_stack(procs, args.redis_url, namespace, None)
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
