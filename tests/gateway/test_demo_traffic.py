"""`manage.py demo_traffic` (the embedded demo's fault schedule) against a gateway and a simulator that are an
httpx MockTransport. The command's clock advances only when it sleeps, so the ~4 minute schedule runs at once."""

from types import SimpleNamespace

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import gateway.management.commands.demo_traffic as demo_traffic

pytestmark = pytest.mark.db_independent

SIMULATOR = "http://sim.test"
GATEWAY = "http://gateway.test"


class FakeTime:
    """A clock that moves only when the command sleeps; a schedule that never lets it move (a sleep of 0) is
    stopped rather than left spinning."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps > 100_000:
            raise AssertionError("the schedule does not advance (sleeps of 0)")
        self.now += seconds


class World:
    """The simulator's control endpoint (recorded) and the gateway, whose chat answer is `chat(world)`."""

    def __init__(self, chat) -> None:
        self.chat = chat
        self.control: list[tuple[str, str]] = []
        self.chat_calls = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "sim.test":
            self.control.append((request.method, request.url.path))
            return httpx.Response(200, json={})
        self.chat_calls += 1
        return self.chat(self)

    @property
    def faulted(self) -> set[str]:
        """The providers the simulator was told to fault and not told to heal since."""
        state: set[str] = set()
        for method, path in self.control:
            name = path.removeprefix("/_sim/providers/")
            if method == "PUT":
                state.add(name)
            elif method == "DELETE":
                state.discard(name)
        return state


@pytest.fixture
def world(monkeypatch):
    def install(chat) -> World:
        w = World(chat)
        real = httpx.Client
        fake = SimpleNamespace(
            Client=lambda **kw: real(transport=httpx.MockTransport(w.handler), **kw),
            HTTPError=httpx.HTTPError,
            Response=httpx.Response,
        )
        monkeypatch.setattr(demo_traffic, "httpx", fake)
        monkeypatch.setattr(demo_traffic, "time", FakeTime())
        return w

    return install


def _run(**options) -> None:
    call_command("demo_traffic", key="cp-demo", base_url=GATEWAY, simulator=SIMULATOR, **options)


def _served(world: World) -> httpx.Response:
    """openai serves while the simulator has no fault; the chain's claude-sonnet-4 during the outage."""
    if "openai" in world.faulted:
        return httpx.Response(200, json={}, headers={"x-vidai-model": "claude-sonnet-4", "x-vidai-fallback": "true"})
    return httpx.Response(200, json={}, headers={"x-vidai-model": "gpt-4o"})


def test_the_schedule_faults_the_simulator_then_heals_it(world, capsys):
    w = world(_served)

    _run()

    assert w.control == [
        ("GET", "/_sim/state"),
        ("PUT", "/_sim/providers/openai"),
        ("PUT", "/_sim/providers/azure"),
        ("DELETE", "/_sim/providers/openai"),
        ("DELETE", "/_sim/providers/azure"),
    ]
    assert "Done: circuit closed again" in capsys.readouterr().out


@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_key_stops_it_at_once_with_a_clear_error(world, status):
    w = world(lambda self: httpx.Response(status, json={"error": {"code": "invalid_api_key"}}))

    with pytest.raises(CommandError, match=rf"refused the key \({status} invalid_api_key\).*--key"):
        _run()

    assert w.chat_calls == 1  # one probe, not the whole schedule
    assert w.faulted == set() and w.control == [("GET", "/_sim/state")]  # the simulator was never faulted


def test_an_unreachable_gateway_is_a_command_error_not_a_traceback(world):
    def refuse(self):
        raise httpx.ConnectError("[Errno 111] Connection refused")

    w = world(refuse)

    with pytest.raises(CommandError, match=rf"Gateway not reachable at {GATEWAY} \(\[Errno 111\] Connection refused\)"):
        _run()

    assert w.control == [("GET", "/_sim/state")]


def test_a_gateway_gone_during_the_outage_is_a_command_error_and_the_simulator_is_healed(world):
    def chat(self):
        if self.faulted:
            raise httpx.ReadError("connection reset")
        return _served(self)

    w = world(chat)

    with pytest.raises(CommandError, match="Gateway not reachable"):
        _run()

    assert w.faulted == set()


def test_ctrl_c_during_the_outage_heals_the_simulator(world):
    def chat(self):
        if self.faulted:
            raise KeyboardInterrupt
        return _served(self)

    w = world(chat)

    with pytest.raises(KeyboardInterrupt):
        _run()

    assert ("DELETE", "/_sim/providers/openai") in w.control
    assert ("DELETE", "/_sim/providers/azure") in w.control
    assert w.faulted == set()


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("rate", 0, "--rate must be a number of requests per second above 0"),
        ("rate", -2, "--rate must be a number of requests per second above 0"),
        ("rate", float("nan"), "--rate must be"),
        ("rate", float("inf"), "--rate must be"),
        ("outage", -1, "--outage must be a number of seconds, 0 or more"),
    ],
)
def test_a_rate_or_outage_it_cannot_keep_is_a_command_error(world, option, value, words):
    w = world(_served)

    with pytest.raises(CommandError, match=words):
        _run(**{option: value})

    assert (w.chat_calls, w.control) == (0, [])
