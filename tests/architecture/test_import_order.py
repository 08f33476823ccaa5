"""The apps depend in one direction (docs/architecture.md), checked by import-linter's layers contract.

The contract lives in pyproject.toml. The second test proves the check can fail: it copies the apps'
sources, adds one import that goes up the layers, and expects import-linter to name it.
"""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _apps() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return config["root_packages"]


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_apps_import_only_the_layers_below_them():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_an_import_up_the_layers_breaks_the_contract(tmp_path):
    for app in _apps():
        shutil.copytree(ROOT / app, tmp_path / app, ignore=shutil.ignore_patterns("*.html", "*.pyc", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert _lint_imports(tmp_path).returncode == 0

    # The audit log (low) reaching into the gateway (high): the kind of import the contract exists to stop.
    wrong = tmp_path / "audit" / "selectors.py"
    wrong.write_text(wrong.read_text() + "\nfrom gateway import snapshot  # noqa\n")
    result = _lint_imports(tmp_path)

    assert result.returncode == 1
    assert "audit is not allowed to import gateway" in result.stdout
    assert "audit.selectors -> gateway.snapshot" in result.stdout
