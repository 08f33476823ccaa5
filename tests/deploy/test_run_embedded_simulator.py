"""`manage.py run_embedded` (what `make run` starts) and its simulator child: it serves only once the simulator
answers, stops with a clear error when the simulator cannot start (its port taken), and its banner gives the
demo_traffic command for the ports in use. uvicorn's serving is replaced by a recorder: no product port is bound."""

import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import gateway.management.commands.run_embedded as run_embedded
from tests.servers import free_port


class Recorder:
    """Stands in for uvicorn.run: records each call and, when told the simulator's port, what the simulator
    answered at that moment."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.simulator_port: int | None = None

    def __call__(self, app, **kwargs) -> None:
        state: httpx.Response | Exception | None = None
        if self.simulator_port is not None:
            try:
                state = httpx.get(f"http://127.0.0.1:{self.simulator_port}/_sim/state", timeout=5)
            except httpx.HTTPError as exc:
                state = exc
        self.calls.append({"app": app, "simulator_state": state, **kwargs})


@pytest.fixture
def served(settings, tmp_path, monkeypatch) -> Recorder:
    """run_embedded in embedded mode over an empty var/, serving into a Recorder."""
    settings.EMBEDDED = True
    settings.VAR_DIR = tmp_path
    recorder = Recorder()
    monkeypatch.setattr(run_embedded.uvicorn, "run", recorder)
    return recorder


def test_a_taken_simulator_port_stops_it_before_serving(served, capsys):
    calls = served.calls
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(CommandError, match=rf"Simulator port {port} in use.*SIM_PORT"):
            call_command("run_embedded", port=free_port(), simulator_port=port)

    assert calls == []  # never served
    assert "Control Plane (embedded)" not in capsys.readouterr().out  # no banner either


def test_a_simulator_that_exits_before_answering_stops_it_before_serving(served, monkeypatch, tmp_path, capsys):
    calls = served.calls
    monkeypatch.setattr(run_embedded, "ROOT", tmp_path)  # no manage.py there: the child exits at once
    children: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        children.append(real_popen(*args, **kwargs, stderr=subprocess.DEVNULL))
        return children[-1]

    monkeypatch.setattr(run_embedded.subprocess, "Popen", popen)
    port = free_port()

    with pytest.raises(CommandError, match=rf"The simulator exited \(code 2\) before answering.*port {port} in use"):
        call_command("run_embedded", port=free_port(), simulator_port=port)

    assert calls == []
    assert "Control Plane (embedded)" not in capsys.readouterr().out
    assert [child.returncode for child in children] == [2]


def test_it_serves_once_the_simulator_answers_and_stops_the_simulator_after(served, monkeypatch, capsys):
    calls = served.calls
    children: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        children.append(real_popen(*args, **kwargs))
        return children[-1]

    monkeypatch.setattr(run_embedded.subprocess, "Popen", popen)
    port, simulator_port = free_port(), free_port()
    served.simulator_port = simulator_port

    call_command("run_embedded", port=port, simulator_port=simulator_port)

    assert len(calls) == 1
    state = calls[0]["simulator_state"]
    assert isinstance(state, httpx.Response) and state.status_code == 200, state  # up before serving began
    assert calls[0]["port"] == port
    assert children[0].returncode is not None  # stopped when serving ended
    out = capsys.readouterr().out
    assert f"demo_traffic --base-url http://127.0.0.1:{port} --simulator http://127.0.0.1:{simulator_port}" in out


def test_the_banner_gives_demo_traffic_no_options_on_the_default_ports(served, capsys):
    calls = served.calls

    run_embedded.Command()._serve("127.0.0.1", 8000, 8001)  # uvicorn.run is the recorder: nothing binds

    out = capsys.readouterr().out
    assert "Watch circuits open and fallbacks fire: .venv/bin/python manage.py demo_traffic\n" in out
    assert len(calls) == 1


def test_the_banner_gives_the_base_url_when_the_port_is_not_8000(served, capsys):
    run_embedded.Command()._serve("127.0.0.1", 8100, 8001)

    out = capsys.readouterr().out
    assert "manage.py demo_traffic --base-url http://127.0.0.1:8100\n" in out


def test_make_run_sim_port_moves_the_simulator_and_the_url_the_demo_is_seeded_with():
    root = Path(run_embedded.ROOT)
    planned = subprocess.run(
        ["make", "-n", "run", "SIM_PORT=18123", "PORT=18124"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout

    seed = next(line for line in planned.splitlines() if "manage.py seed_demo" in line)
    serve = next(line for line in planned.splitlines() if "manage.py run_embedded" in line)
    assert "SIMULATOR_URL=http://127.0.0.1:18123 " in seed
    assert "--port 18124" in serve
    assert "--simulator-port 18123" in serve
    assert "SIMULATOR_URL=http://127.0.0.1:18123 " in serve
