"""Send demo traffic with a fault schedule: circuits open, fallbacks fire, circuits close again."""

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Summarise the incident in one line."}]}


class Command(BaseCommand):
    help = "Drive the embedded demo: healthy traffic, an outage of openai (and azure-openai), fallback, recovery."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--base-url", default="http://127.0.0.1:8000")
        parser.add_argument("--simulator", default="http://127.0.0.1:8001")
        parser.add_argument("--key", default="", help="gateway key (default: the demo key in var/)")
        parser.add_argument("--rate", type=float, default=5.0, help="requests per second")
        parser.add_argument("--outage", type=float, default=20.0, help="seconds the primary fails")

    def handle(
        self, *args: Any, base_url: str, simulator: str, key: str, rate: float, outage: float, **options: Any
    ) -> None:
        if not (math.isfinite(rate) and rate > 0):
            raise CommandError(f"--rate must be a number of requests per second above 0, not {rate}.")
        if not (math.isfinite(outage) and outage >= 0):
            raise CommandError(f"--outage must be a number of seconds, 0 or more, not {outage}.")
        key = key or self._demo_key()
        client = httpx.Client(timeout=30)
        headers = {"authorization": f"Bearer {key}"}
        try:
            client.get(f"{simulator}/_sim/state").raise_for_status()
        except httpx.HTTPError as exc:
            raise CommandError(f"Simulator not reachable at {simulator} ({exc}); start `make run` first.") from None

        def post() -> "httpx.Response":
            try:
                return client.post(f"{base_url}/v1/chat/completions", json=BODY, headers=headers)
            except httpx.HTTPError as exc:
                raise CommandError(f"Gateway not reachable at {base_url} ({exc}); start `make run` first.") from None

        # One request first: a key the gateway refuses would otherwise run the whole schedule on 401s.
        first = post()
        if first.status_code in (401, 403):
            why = " ".join(filter(None, (str(first.status_code), _error_code(first))))
            raise CommandError(
                f"The gateway at {base_url} refused the key ({why}): pass a valid one with --key (the demo key is "
                "the one `make run` prints)."
            )
        started = time.monotonic()
        counts: Counter[str] = Counter()

        def send(phase: str, seconds: float) -> None:
            end = time.monotonic() + seconds
            last_print = 0.0
            while time.monotonic() < end:
                response = post()
                served = response.headers.get("x-vidai-model", "-")
                label = f"{response.status_code} {served}" + (
                    " (fallback)" if "x-vidai-fallback" in response.headers else ""
                )
                counts[label] += 1
                now = time.monotonic()
                if now - last_print >= 5:
                    summary = ", ".join(f"{n}× {what}" for what, n in counts.most_common())
                    self.stdout.write(f"[{now - started:5.0f}s] {phase}: {summary}")
                    counts.clear()
                    last_print = now
                time.sleep(1 / rate)

        self.stdout.write("Healthy traffic to gpt-4o (served by openai)…")
        send("healthy", 10)
        # A regional incident: openai answers 503 and the Azure deployment (the chain's first entry) rate-limits
        # the spill-over, so the chain goes on to claude-sonnet-4, an Anthropic Messages upstream: the OpenAI
        # client keeps getting OpenAI-shaped answers, translated by the gateway.
        self.stdout.write(
            "openai starts answering 503 and azure-openai 429: watch the circuits open and the chain take over "
            "on claude-sonnet-4 (Anthropic Messages API, translated)…"
        )
        try:
            client.put(f"{simulator}/_sim/providers/openai", json={"mode": "status", "status": 503})
            client.put(f"{simulator}/_sim/providers/azure", json={"mode": "status", "status": 429})
            send("outage", outage)
        finally:
            # However the outage ends (Ctrl-C, the gateway gone), the simulator must not stay faulted.
            self._heal(client, simulator)
        self.stdout.write("openai and azure-openai recover; after the cooldown one probe closes each circuit…")
        circuit = self._wait_closed(post, send)
        self.stdout.write(self.style.SUCCESS(f"Done: circuit {circuit}. See Provider Health and the audit log."))

    def _heal(self, client: httpx.Client, simulator: str) -> None:
        """Clear the outage's faults on the simulator; say so when one could not be cleared."""
        for name in ("openai", "azure"):
            try:
                client.delete(f"{simulator}/_sim/providers/{name}").raise_for_status()
            except httpx.HTTPError as exc:
                self.stderr.write(
                    f"Could not clear {name}'s fault on the simulator ({exc}): `POST {simulator}/_sim/reset` "
                    "or restart `make run`."
                )

    def _wait_closed(self, post: Callable[[], httpx.Response], send: Callable[[str, float], None]) -> str:
        for _ in range(40):  # cooldowns are at least 30 s, at most the cap
            send("recovery", 5)
            probe = post()
            if "x-vidai-fallback" not in probe.headers and probe.status_code == 200:
                return "closed again, traffic back on openai"
        return "still open (cooldown longer than this demo waited)"

    def _demo_key(self) -> str:
        path = settings.VAR_DIR / "demo_gateway_key"
        if not path.exists():
            raise CommandError("No demo key: run `make run` (it seeds one) or pass --key.")
        return path.read_text().strip()


def _error_code(response: httpx.Response) -> str:
    """The `error.code` of a gateway error answer, or "" when it has none."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return ""
    return str(error.get("code") or "") if isinstance(error, dict) else ""
