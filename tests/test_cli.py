"""The console script is installed and answers --version and --help."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from airflow_provider_streamstate import __version__


def _streamstate() -> str:
    exe = Path(sys.executable).parent / "streamstate"
    return str(exe) if exe.exists() else shutil.which("streamstate") or "streamstate"


def test_version_is_the_package_version() -> None:
    out = subprocess.run([_streamstate(), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"streamstate {__version__}"
    assert __version__ == "0.1.0"


def test_help_lists_usage_and_exits_zero() -> None:
    out = subprocess.run([_streamstate(), "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "usage: streamstate" in out.stdout


def test_a_command_group_without_subcommand_shows_its_help_and_exits_2() -> None:
    out = subprocess.run([_streamstate(), "snapshot"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "usage: streamstate snapshot" in out.stderr and "create" in out.stderr
