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


def test_the_cli_run_in_process_twice_logs_to_each_runs_stderr(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """An embedding program (or a test) runs `main` again after the stderr of the first run is
    gone: warnings go to the stderr of the run that emits them, and nothing else is printed."""
    import io
    import logging

    from airflow_provider_streamstate.cli.main import main

    (tmp_path / "s").mkdir()
    first = io.StringIO()
    sys.stderr, saved = first, sys.stderr
    try:
        assert main(["--verbose", "snapshot", "list", "--store", str(tmp_path / "s"), "--stream", "a"]) == 1
    finally:
        sys.stderr = saved
    assert "stream a has no snapshots" in first.getvalue()
    first.close()
    second = io.StringIO()
    sys.stderr = second
    try:
        logging.getLogger("streamstate.test").warning("the second run's warning")
    finally:
        sys.stderr = saved
    assert second.getvalue().endswith("the second run's warning\n")
    assert "Logging error" not in second.getvalue() and "Logging error" not in capsys.readouterr().err
