"""Files holding secrets stay out of the image and out of git: compose reads SECRET_KEY and POSTGRES_PASSWORD
from `.env` next to docker-compose.yml, and embedded mode keeps its generated key, admin password and database
(encrypted provider keys) under var/. The Dockerfile's `COPY . .` takes whatever .dockerignore lets through."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRETS = [
    ".env",
    ".env.production",
    "var/secret_key",
    "var/admin_password",
    "var/controlplane.sqlite3",
]


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`), anchored at the context root."""
    out = ""
    i = 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def docker_ignores(path: str) -> bool:
    """Whether .dockerignore keeps `path` out of the build context (a match on the path or a parent directory;
    the last matching line wins, `!` re-includes)."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for line in lines:
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        regex = _pattern(line.removeprefix("!"))
        if any(regex.match(candidate) for candidate in candidates):
            ignored = not negate
    return ignored


@pytest.mark.parametrize("path", SECRETS)
def test_secret_files_are_not_copied_into_the_image(path):
    """`.env` was not listed: `docker compose build` baked SECRET_KEY and POSTGRES_PASSWORD into an image layer."""
    assert docker_ignores(path)


@pytest.mark.parametrize("path", SECRETS)
def test_secret_files_are_ignored_by_git(path):
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, capture_output=True, check=False, timeout=30
    )

    assert result.returncode == 0, f"{path} is not ignored by .gitignore"


def test_the_application_is_still_copied():
    for path in ("manage.py", "controlplane/settings.py", "templates/base.html", "static/css/app.css"):
        assert not docker_ignores(path)
