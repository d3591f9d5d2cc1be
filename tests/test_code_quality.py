"""The code stays ruff-clean and type-checks, as CI sees it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run([str(BIN / "ruff"), "check", "--quiet", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing() -> None:
    proc = subprocess.run([str(BIN / "mypy")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_test_imports_conftest_as_a_module() -> None:
    """pytest imports tests/conftest.py as `conftest`; `from tests.conftest import ...` would run
    it a second time (a second Airflow home: a DAG run then reads a DB nobody migrated)."""
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")
                 if p.name != "test_code_quality.py" and re.search(r"^\s*(from tests\.conftest|import tests\.conftest)",
                                                                    p.read_text(), re.M)]
    assert offenders == []


def test_the_layout_contract_holds() -> None:
    """docs/architecture.md's arrows: the engine's layers, no import cycle (imports inside
    functions count), no Airflow in the engine, CLI command groups independent."""
    proc = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout, proc.stdout
