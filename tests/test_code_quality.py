"""The code stays ruff-clean and type-checks, as CI sees it."""

from __future__ import annotations

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
