"""What checking a chat body costs the event loop, per body, now and at an earlier revision.

For each body: the work GatewayApp._parse does on the event loop (parse_body when the body is parsed
inline, none when it goes to the worker thread; the comma count that decides is included) in µs, best
of 5 runs, freeing the parsed object included, and where it is parsed. The baseline is gateway/bodies.py
at a git revision (default HEAD), parsed inline up to 256 KiB as that revision did; `orjson.loads`
alone is the floor.

    .venv/bin/python bench/body_parse.py [--baseline-rev HEAD]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.app import THREAD_BYTES, THREAD_VALUES  # noqa: E402
from gateway.bodies import BodyLimits, parse_body  # noqa: E402

LARGE = BodyLimits().large_body  # the baseline's inline limit


def chat(messages: int, text: str) -> bytes:
    body = {
        "model": "gpt-4o",
        "temperature": 0.2,
        "messages": [{"role": "system", "content": "You are a helpful assistant."}]
        + [{"role": "user" if i % 2 else "assistant", "content": text} for i in range(messages)],
    }
    return orjson.dumps(body)


PROSE = "The quick brown fox jumps over the lazy dog, twice: once at noon and once at night. "
ESCAPED = 'He said "hi"\n\tthen left; path C:\\tmp\\x, JSON {"a": 1}. '
BODIES = {
    "1 KiB chat": chat(4, PROSE * 2),
    "3 KiB chat": chat(8, PROSE * 4),
    "3 KiB chat, escapes": chat(8, ESCAPED * 6),
    "25 KiB chat, escapes": chat(40, ESCAPED * 10),
    "60 KiB chat, escapes": chat(92, ESCAPED * 10),
    "240 KiB chat, escapes": chat(370, ESCAPED * 10),
    "144 KiB of 49,000 {}": b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"metadata":['
    + b",".join([b"{}"] * 49_000)
    + b"]}",
}


def load_baseline(rev: str) -> ModuleType:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:gateway/bodies.py"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_bodies.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_bodies", path)
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_bodies"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def best_us(fn: Callable[[bytes], object], raw: bytes) -> float:
    number = max(1, int(2e5 // max(len(raw), 1)))
    return min(timeit.repeat(lambda: fn(raw), number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-rev", default="HEAD")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline_rev)
    limits, old_limits = BodyLimits(), baseline.BodyLimits()

    def now_on_loop(raw: bytes) -> None:
        if len(raw) <= THREAD_BYTES and raw.count(b",") <= THREAD_VALUES:  # as GatewayApp._parse
            try:
                parse_body(raw, limits)
            except Exception:
                pass

    def before_on_loop(raw: bytes) -> None:
        if len(raw) <= LARGE:
            try:
                baseline.parse_body(raw, old_limits)
            except Exception:
                pass

    load = os.getloadavg()[0]
    print(f"\nBody checks on the event loop — {os.cpu_count()} cores, load average {load:.1f}\n")
    print(f"| body | bytes | orjson.loads | {args.baseline_rev} on the loop | now on the loop | now parsed in |")
    print("|---|---:|---:|---:|---:|---|")
    for name, raw in BODIES.items():
        where = "loop" if len(raw) <= THREAD_BYTES and raw.count(b",") <= THREAD_VALUES else "thread"
        print(
            f"| {name} | {len(raw):,} | {best_us(orjson.loads, raw):.1f} µs | {best_us(before_on_loop, raw):.1f} µs "
            f"| {best_us(now_on_loop, raw):.1f} µs | {where} |"
        )


if __name__ == "__main__":
    main()
