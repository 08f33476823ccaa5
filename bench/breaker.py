"""Per-request cost of the breaker: allow() on a closed circuit, record(), and both together.

Runs both backends (memory; Redis at REDIS_URL or TEST_REDIS_URL, default redis://127.0.0.1:6379/0)
and prints µs per call, the median of several runs. A second table prints allow() with operator holds
in the configuration: on other circuits (the closed circuit still answers), and on this one (refused).

    .venv/bin/python bench/breaker.py [--calls 20000] [--runs 5]
"""

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import redis

from health.breaker import BreakerEngine, ConfigSet, Control, ControlKind, Outcome, build_engine

OK = Outcome.of_status(200)


def _time(fn: Callable[[int], None], calls: int) -> float:
    start = time.perf_counter()
    fn(calls)
    return (time.perf_counter() - start) / calls * 1e6


def bench(engine: BreakerEngine, calls: int, runs: int) -> dict[str, float]:
    allow, record = engine.allow, engine.record
    decision = allow("bench", "model")
    record(decision, OK)
    engine.flush()

    def decide(n: int) -> None:
        for _ in range(n):
            allow("bench", "model")

    def report(n: int) -> None:
        for _ in range(n):
            record(decision, OK)

    def both(n: int) -> None:
        for _ in range(n):
            record(allow("bench", "model"), OK)

    results: dict[str, list[float]] = {"allow": [], "record": [], "allow+record": [], "applied/s": []}
    for _ in range(runs):
        results["allow"].append(_time(decide, calls))
        results["record"].append(_time(report, calls))
        # Drain between runs so the queue does not grow across runs; for Redis this measures how many
        # outcomes per second the background sender applies (one EVALSHA each, pipelined).
        start = time.perf_counter()
        engine.flush(timeout=600)
        results["applied/s"].append(calls / (time.perf_counter() - start))
        results["allow+record"].append(_time(both, calls))
        engine.flush(timeout=600)
    return {name: statistics.median(values) for name, values in results.items()}


def bench_holds(engine: BreakerEngine, calls: int, runs: int) -> dict[str, float]:
    """allow() while 50 circuits of other providers are drained, then while this circuit is forced open."""
    allow = engine.allow

    def decide(n: int) -> None:
        for _ in range(n):
            allow("bench", "model")

    others = {(f"other{i}", ""): Control(ControlKind.DRAINED, f"other{i}", "", "bench", until=None) for i in range(50)}
    results: dict[str, list[float]] = {"elsewhere": [], "held": []}
    for _ in range(runs):
        engine.configure(ConfigSet(controls=others))
        assert allow("bench", "model").allowed
        results["elsewhere"].append(_time(decide, calls))
        forced = Control(ControlKind.FORCED_OPEN, "bench", "model", "bench")
        engine.configure(ConfigSet(controls={**others, ("bench", "model"): forced}))
        assert not allow("bench", "model").allowed
        results["held"].append(_time(decide, calls))
        engine.configure(ConfigSet())
    return {name: statistics.median(values) for name, values in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL") or os.environ.get("TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"

    memory = build_engine()
    rows = [("memory", bench(memory, args.calls, args.runs))]
    holds = [("memory", bench_holds(memory, args.calls, args.runs))]
    namespace = f"bench:breaker:{uuid.uuid4().hex}"
    engine = build_engine(redis_url=url, namespace=namespace)
    try:
        rows.append(("redis", bench(engine, args.calls, args.runs)))
        holds.append(("redis", bench_holds(engine, args.calls, args.runs)))
    finally:
        engine.close()
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{namespace}:*"))
        if keys:
            client.delete(*keys)

    python = sys.version.split()[0]
    print(f"breaker cost, µs per call (median of {args.runs} runs × {args.calls} calls, Python {python})")
    print(f"{'backend':<8} {'allow (closed)':>15} {'record':>10} {'allow+record':>14} {'outcomes applied/s':>20}")
    for name, r in rows:
        applied = "inline" if name == "memory" else f"{r['applied/s']:,.0f}"
        print(f"{name:<8} {r['allow']:>15.2f} {r['record']:>10.2f} {r['allow+record']:>14.2f} {applied:>20}")
    print()
    print("allow() with operator holds, µs per call")
    print(f"{'backend':<8} {'50 holds elsewhere':>19} {'this circuit held':>18}")
    for name, r in holds:
        print(f"{name:<8} {r['elsewhere']:>19.2f} {r['held']:>18.2f}")


if __name__ == "__main__":
    main()
