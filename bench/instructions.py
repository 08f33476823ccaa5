"""Instructions per proxied request in one production-mode gateway worker, counted by valgrind (callgrind).

Wall-clock figures on a shared 2-core machine move by 30% within an hour; an instruction count does not move
with the machine's load. This starts the simulator and one gateway worker (the same uvicorn command line as
`run_gateway`, production mode: Redis-backed breaker, request-log stream) under `valgrind --tool=callgrind`
with counting off, then for the healthy model, the failover model (primary's circuit open, the chain's first
entry serving) and the same failover with the chain's resilience policy on, in the order ABCCBA: sends warm-up
requests, turns counting on, sends `--requests` requests one after another on one keep-alive connection, turns
counting off and dumps the counts per thread. It prints instructions per request for the event-loop thread
(where every request runs) and for the worker's other threads (log shipping, breaker outcomes, metrics,
configuration), the failover path's extra over the healthy one, and the policy's over the default failover.
The event-loop figure repeats within about 0.5% between rounds; the other threads' less, as their batches
depend on timing.

    .venv/bin/python bench/instructions.py [--requests 300] [--by-function 40]

`--by-function N` runs the worker with Python's perf trampolines on (PYTHONPERFSUPPORT=1: each Python
function runs through its own small piece of machine code, which callgrind counts as a function, and the
interpreter names those pieces in /tmp/perf-PID.map). It then prints the N Python functions whose inclusive
count per request differs most between the first healthy and the first failover round, and between that
failover round and the first with the policy on. The trampolines add about 110,000 instructions per request,
so read the differences, not the totals.

Needs valgrind (`apt-get install -y valgrind`) and a local Redis; takes a few minutes (the worker runs about
50 times slower under valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import (
    BODY,
    FALLBACK_BODY,
    RESILIENT_BODY,
    ROOT,
    free_port,
    open_circuit,
    prepare,
    stack_env,
    start_simulator,
    wait_ready,
)
from gateway.management.commands.run_gateway import uvicorn_argv

PATHS = {"healthy": BODY, "failover": FALLBACK_BODY, "failover, policy on": RESILIENT_BODY}
ORDER = ("healthy", "failover", "failover, policy on", "failover, policy on", "failover", "healthy")
_TOTALS = re.compile(r"^totals: (\d+)", re.MULTILINE)


def dump_label(path: str, round_index: int) -> str:
    """The name a round's dump is written under: `failover, policy on` in round 2 is `failover-policy-on-2`."""
    return "-".join([*re.findall(r"\w+", path), str(round_index)])


def callgrind(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def dumps(prefix: Path, label: str) -> dict[Path, str]:
    """The dump files named `label` and their text (one file per thread; the first thread, `-01`, is the one
    uvicorn's event loop runs in)."""
    found = {}
    for path in prefix.parent.glob(prefix.name + "*"):
        text = path.read_text(errors="replace")
        if f"Trigger: dump {label}\n" in text:
            found[path] = text
    return found


def counted(prefix: Path, label: str, timeout: float = 60) -> tuple[int, int]:
    """(event-loop thread, other threads) instructions in the dump named `label`, once it is written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        main = other = 0
        for path, text in dumps(prefix, label).items():
            total = _TOTALS.search(text)
            count = int(total.group(1)) if total else 0
            if path.name.endswith("-01"):
                main = count
            else:
                other += count
        if main:
            return main, other
        time.sleep(0.5)
    raise SystemExit(f"no callgrind dump named {label}")


def loop_dump(prefix: Path, label: str) -> Path:
    """The event-loop thread's dump file named `label` (written: `counted` has read it)."""
    return next(path for path in dumps(prefix, label) if path.name.endswith("-01"))


_INCLUSIVE = re.compile(r"\s*([\d,]+) \([^)]*\)\s+\?\?\?:0x([0-9a-f]+)")


def by_function(dump: Path, perf_map: Path, requests: int) -> dict[str, float]:
    """Inclusive instructions per request of each Python function (its trampoline's address, named by the
    interpreter's perf map) in one callgrind dump."""
    names: dict[int, str] = {}
    for line in perf_map.read_text().splitlines():
        address, _size, name = line.split(" ", 2)
        names[int(address, 16)] = name.removeprefix("py::")
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)], capture_output=True, text=True
    ).stdout
    counts: dict[str, float] = {}
    for line in out.splitlines():
        found = _INCLUSIVE.match(line)
        function = names.get(int(found.group(2), 16)) if found else None
        if found and function is not None:
            counts[function] = counts.get(function, 0) + int(found.group(1).replace(",", "")) / requests
    return counts


def print_by_function(base: tuple[str, dict[str, float]], new: tuple[str, dict[str, float]], n: int) -> None:
    (base_name, before), (new_name, after) = base, new
    print(f"\nInclusive instructions per request by Python function, {new_name} against {base_name}, event-loop")
    print("thread (with trampolines)\n")
    print(f"| function | {base_name} | {new_name} | {new_name} − {base_name} |")
    print("|---|---:|---:|---:|")
    names = sorted(before.keys() | after.keys(), key=lambda k: -abs(after.get(k, 0) - before.get(k, 0)))
    for name in names[:n]:
        b, a = before.get(name, 0), after.get(name, 0)
        print(f"| `{name}` | {b:,.0f} | {a:,.0f} | {a - b:+,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="counted requests per round")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--by-function", type=int, default=0, metavar="N", help="print the N largest differences")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is needed: apt-get install -y valgrind")

    work = Path(tempfile.mkdtemp(prefix="cp-instructions-"))
    sim_port, gw_port = free_port(), free_port()
    sim_url, gw_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gw_port}"
    namespace = f"bench:{uuid.uuid4().hex[:8]}"
    env = stack_env(work, args.redis_url, namespace)
    key = prepare(env, sim_url)
    metrics = work / "metrics"
    metrics.mkdir()
    prefix = work / "callgrind.out"
    procs: list[subprocess.Popen] = []
    rounds: dict[str, list[tuple[int, int]]] = {name: [] for name in PATHS}
    try:
        start_simulator(env, sim_port, procs)
        gw = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                "--separate-threads=yes",
                f"--callgrind-out-file={prefix}",
                *uvicorn_argv("127.0.0.1", gw_port, 1),
            ],
            cwd=ROOT,
            env={
                **env,
                "CONTROLPLANE_PROCESS": "gateway",
                "PROMETHEUS_MULTIPROC_DIR": str(metrics),
                **({"PYTHONPERFSUPPORT": "1"} if args.by_function else {}),
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(gw)
        wait_ready(f"{gw_url}/readyz", gw, timeout=600)
        url = f"{gw_url}/v1/chat/completions"
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        open_circuit(url, headers, FALLBACK_BODY)
        open_circuit(url, headers, RESILIENT_BODY)
        with httpx.Client(timeout=120) as client:
            for i, name in enumerate(ORDER):
                body = PATHS[name]
                for _ in range(50):  # warm-up: pools, caches, the interpreter's specialisations
                    client.post(url, content=body, headers=headers).raise_for_status()
                callgrind("-z", str(gw.pid))
                callgrind("-i", "on", str(gw.pid))
                for _ in range(args.requests):
                    response = client.post(url, content=body, headers=headers)
                    response.raise_for_status()
                    assert (response.headers.get("x-vidai-fallback") == "true") == (name != "healthy")
                callgrind("-i", "off", str(gw.pid))
                label = dump_label(name, i)
                callgrind("-d", label, str(gw.pid))
                main_thread, other = counted(prefix, label)
                rounds[name].append((main_thread // args.requests, other // args.requests))
        if args.by_function:
            perf_map = Path(f"/tmp/perf-{gw.pid}.map")
            first = {name: ORDER.index(name) for name in PATHS}
            healthy, failover, policy = (
                by_function(loop_dump(prefix, dump_label(name, first[name])), perf_map, args.requests) for name in PATHS
            )
            perf_map.unlink(missing_ok=True)
            print_by_function(("healthy", healthy), ("failover", failover), args.by_function)
            print_by_function(("failover", failover), ("policy on", policy), args.by_function)
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=120)
        import redis

        keys = redis.Redis.from_url(args.redis_url)
        for k in keys.scan_iter(f"{namespace}*"):
            keys.delete(k)
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nInstructions per request (callgrind), {args.requests} sequential requests per round, rounds ABCCBA\n")
    print("| path | event-loop thread | other threads | whole worker | rounds (event-loop thread) |")
    print("|---|---:|---:|---:|---|")
    medians = {}
    for name, got in rounds.items():
        loop_thread = statistics.median(m for m, _ in got)
        threads = statistics.median(o for _, o in got)
        medians[name] = (loop_thread, threads)
        each = ", ".join(f"{m:,}" for m, _ in got)
        print(f"| {name} | {loop_thread:,.0f} | {threads:,.0f} | {loop_thread + threads:,.0f} | {each} |")
    print()
    for name, base in (("failover", "healthy"), ("failover, policy on", "failover")):
        (bl, bo), (nl, no) = medians[base], medians[name]
        print(
            f"{name.capitalize()} over {base}: event-loop thread {nl - bl:+,.0f} ({nl / bl - 1:+.1%}), "
            f"whole worker {nl + no - bl - bo:+,.0f} ({(nl + no) / (bl + bo) - 1:+.1%})"
        )


if __name__ == "__main__":
    main()
