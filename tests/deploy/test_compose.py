"""docker-compose.yml and the Dockerfile: valid Compose, consistent services, entry commands that exist.

`docker compose config` needs the compose plugin, which CI does not have; the file is validated against
the Compose Specification's JSON schema instead (vendored under schema/, see schema/SOURCE.md), plus the
checks the schema cannot make.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((Path(__file__).parent / "schema" / "compose-spec.json").read_text())
APP_IMAGE = "controlplane:latest"
# ${NAME:?message} (required), ${NAME:-default} (unset or empty), ${NAME-default} (unset), ${NAME}
_VARIABLE = re.compile(r"\$\{(\w+)(?::?([?-])([^}]*))?\}")


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _dockerfile_cmd() -> list[str]:
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if line.startswith(("CMD ", "ENTRYPOINT "))]
    assert [line.split()[0] for line in lines] == ["CMD"], "the Dockerfile has one exec-form CMD and no ENTRYPOINT"
    return json.loads(lines[0].removeprefix("CMD "))


def schema_errors(compose: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]


def app_commands(compose: dict[str, Any]) -> dict[str, list[str]]:
    """The command each service running the app image runs (the Dockerfile CMD when it sets none)."""
    return {
        name: service.get("command") or _dockerfile_cmd()
        for name, service in compose["services"].items()
        if service.get("image") == APP_IMAGE
    }


def semantic_problems(compose: dict[str, Any]) -> list[str]:
    from django.core.management import get_commands

    services = compose["services"]
    problems = []
    for name, service in services.items():
        for target in service.get("depends_on") or {}:
            if target not in services:
                problems.append(f"{name} depends on {target}, which is not a service")
        if service.get("profiles"):
            problems.append(f"{name} has profiles: plain `docker compose up` would not start it")
    for name, command in app_commands(compose).items():
        program = command[0]
        if program == "python" and command[1:2] == ["manage.py"]:
            if command[2] not in get_commands():
                problems.append(f"{name} runs manage.py {command[2]}, which is not a command")
        elif program == "celery":
            if command[1:3] != ["-A", "controlplane"] or command[3] not in ("worker", "beat"):
                problems.append(f"{name} runs {' '.join(command)}: expected celery -A controlplane worker|beat")
        elif program != "gunicorn":
            problems.append(f"{name} runs {program}, which the image does not provide")
    return problems


def compose_environment(compose: dict[str, Any]) -> dict[str, str]:
    """The app services' environment as compose would interpolate it with only the required variables set."""

    def value(match: re.Match[str]) -> str:
        name, kind, rest = match.groups()
        if kind == "-":
            return rest
        return {"SECRET_KEY": "compose-" + "k" * 50, "POSTGRES_PASSWORD": "pw"}.get(name, "")

    environment = compose["x-app"]["environment"]
    return {key: _VARIABLE.sub(value, str(raw)) for key, raw in environment.items()}


def test_compose_file_matches_the_compose_specification():
    assert schema_errors(_compose()) == []


def test_schema_validation_catches_a_misspelt_key():
    compose = _compose()
    compose["services"]["gateway"]["dependson"] = compose["services"]["gateway"].pop("depends_on")

    assert schema_errors(compose) == ["services/gateway: 'dependson' does not match any of the regexes: '^x-'"]


def test_every_service_starts_with_docker_compose_up_and_its_dependencies_exist():
    assert semantic_problems(_compose()) == []
    assert {"console", "gateway", "worker", "beat", "migrate"} <= set(app_commands(_compose()))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda c: c["services"]["gateway"].update(profiles=["gateway"]), "gateway has profiles"),
        (
            lambda c: c["services"]["worker"]["depends_on"].update(cache={"condition": "service_started"}),
            "worker depends on cache, which is not a service",
        ),
        (
            lambda c: c["services"]["gateway"]["command"].__setitem__(2, "run_gatway"),
            "gateway runs manage.py run_gatway, which is not a command",
        ),
    ],
)
def test_semantic_checks_catch_broken_services(change, problem):
    compose = _compose()
    change(compose)

    assert [p for p in semantic_problems(compose) if p.startswith(problem)] != []


def _entry_commands() -> list[tuple[str, list[str]]]:
    seen: dict[str, list[str]] = {}
    for command in app_commands(_compose()).values():
        seen.setdefault(" ".join(command), command)
    seen.setdefault(" ".join(_dockerfile_cmd()), _dockerfile_cmd())
    return sorted(seen.items())


def _runnable(command: list[str]) -> list[str]:
    # The image's `python`, `celery` and `gunicorn` are this interpreter and its installed packages.
    program, *args = command
    if program == "python":
        return [sys.executable, *args]
    return [sys.executable, "-m", program, *args]


@pytest.mark.parametrize(("label", "command"), _entry_commands(), ids=[label for label, _ in _entry_commands()])
def test_entry_command_help_runs_with_the_compose_environment(label, command):
    keep = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env = {**keep, **compose_environment(_compose()), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}

    result = subprocess.run(
        [*_runnable(command), "--help"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


def test_compose_environment_passes_the_deploy_check():
    keep = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env = {**keep, **compose_environment(_compose()), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}

    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert "no issues (0 silenced)" in result.stdout


def _deploy_check(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env = {**keep, **environment, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_compose_trusts_the_one_proxy_it_is_published_to_and_passes_the_throttle_settings():
    environment = compose_environment(_compose())
    ports = {name: compose_ports for name, s in _compose()["services"].items() if (compose_ports := s.get("ports"))}

    assert ports == {
        "console": ["${BIND_ADDRESS:-127.0.0.1}:8000:8000"],
        "gateway": ["${BIND_ADDRESS:-127.0.0.1}:8080:8080"],
    }
    assert {key: environment[key] for key in environment if key.startswith(("TRUSTED_", "AUTH_", "SECURE_PROXY"))} == {
        "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https",
        "TRUSTED_PROXY_COUNT": "1",
        "AUTH_FAILURE_LIMIT": "5",
        "AUTH_FAILURE_WINDOW_SECONDS": "900",
        "AUTH_LOCKOUT_SECONDS": "900",
    }


def test_deploy_check_warns_when_a_proxy_is_trusted_for_https_but_not_for_the_client_address():
    environment = {**compose_environment(_compose()), "TRUSTED_PROXY_COUNT": "0"}

    result = _deploy_check(environment)

    assert result.returncode == 1
    assert "access.W001" in result.stderr
    assert "TRUSTED_PROXY_COUNT is 0" in result.stderr
