"""Shared pieces of the resilience-policy tests: a gateway whose planner clock is virtual, and readers."""

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from chains.models import FallbackChain
from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from health.breaker.factory import build_engine
from health.breaker.types import ConfigSet, ManualClock
from requestlogs.models import RequestLog
from tests.gateway.conftest import TEST_BREAKER
from tests.servers import serve

BODY: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
STREAM: dict[str, Any] = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
# The simulator's stream of 5 chunks: a role delta, then these words.
WORDS = "word1 word2 word3 word4 "
# Small, fast knobs; each test overrides what it is about.
FAST = {
    "enabled": True,
    "backoff_base_ms": 200,
    "backoff_floor_ms": 50,
    "backoff_cap_ms": 2000,
    "first_token_timeout_seconds": 0.5,
    "idle_timeout_seconds": 0.5,
}


@dataclass
class VirtualTime:
    """The planner's clock: real monotonic time plus every wait the gateway asked for, which passes at once.

    The simulator stamps arrivals with the same clock, so the gaps between calls are the gateway's planned
    waits (plus the little real time in between): exact lower bounds, without sleeping in the test.
    """

    offset: float = 0.0
    waits: list[float] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() + self.offset

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.offset += seconds
        await asyncio.sleep(0)


@dataclass
class Rig:
    url: str
    app: GatewayApp
    clock: ManualClock  # the breaker's
    time: VirtualTime
    sink: LogSink
    world: Any
    # The last request's total time on the planner's clock: real time plus the waits it planned.
    elapsed: float = 0.0

    def post(self, body: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        t0 = self.time.now()
        try:
            return self._post(body, **kwargs)
        finally:
            self.elapsed = self.time.now() - t0

    def _post(self, body: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        return httpx.post(
            f"{self.url}/v1/chat/completions",
            json=body or BODY,
            headers={"authorization": f"Bearer {self.world.secret}"},
            timeout=30,
            **kwargs,
        )

    def stream(self, body: dict[str, Any] | None = None) -> tuple[httpx.Response, list[str]]:
        """The response and its `data:` payloads, in order."""
        t0 = self.time.now()
        try:
            return self._stream(body)
        finally:
            self.elapsed = self.time.now() - t0

    def _stream(self, body: dict[str, Any] | None) -> tuple[httpx.Response, list[str]]:
        with httpx.stream(
            "POST",
            f"{self.url}/v1/chat/completions",
            json=body or STREAM,
            headers={"authorization": f"Bearer {self.world.secret}"},
            timeout=30,
        ) as response:
            text = b"".join(response.iter_bytes()).decode()
        events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
        return response, events

    def fault(self, provider: str, **behaviour: Any) -> None:
        sim = self.world.sim
        sim.behaviours[provider] = sim.behaviour(provider).updated(behaviour)

    def calls(self) -> dict[str, int]:
        return dict(self.world.sim.requests)

    def log(self) -> RequestLog:
        assert self.sink.flush(timeout=10)
        return RequestLog.objects.order_by("-created_at", "-id").first()


def set_policy(policy: dict[str, Any] | None, chain_name: str = "gpt-4o chain") -> None:
    """The chain's stored policy (None: off, the default), set before the gateway reads its snapshot."""
    FallbackChain.objects.filter(name=chain_name).update(resilience=policy or {})


@contextmanager
def rig(world: Any, policy: dict[str, Any] | None, *, seed: int = 7) -> Iterator[Rig]:
    import random

    set_policy(policy)
    clock = ManualClock()
    vt = VirtualTime()
    world.sim.monotonic = vt.now
    engine = build_engine(clock=clock, config=ConfigSet(default=TEST_BREAKER))
    sink = LogSink(flush_seconds=0.05)
    app = GatewayApp(
        config=ConfigHolder(),
        engine=engine,
        sink=sink,
        max_body=64 * 1024,
        clock=vt.now,
        sleep=vt.sleep,
        rng=random.Random(seed),
    )
    with serve(app, lifespan=True) as url:
        yield Rig(url=url, app=app, clock=clock, time=vt, sink=sink, world=world)


def content(events: list[str]) -> str:
    """The answer's text, from a stream's chunks."""
    text = []
    for raw in events:
        if raw == "[DONE]":
            continue
        event = orjson.loads(raw)
        for choice in event.get("choices") or []:
            text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text)


def chunks(events: list[str]) -> list[dict[str, Any]]:
    return [orjson.loads(e) for e in events if e != "[DONE]"]
