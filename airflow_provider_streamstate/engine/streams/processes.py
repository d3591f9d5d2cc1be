"""Processes this host started: a driver spark-submit runs here (client mode, local mode),
or a spark-submit that only submits. Alive means alive and the same process: not a
zombie, not a pid the kernel gave to another process since (checked by its start time).

The drivers this process started are kept so that they are reaped (a zombie still answers
`kill(pid, 0)`) and their exit codes are known."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

_children: dict[int, subprocess.Popen[bytes]] = {}


def adopt(proc: subprocess.Popen[bytes]) -> None:
    """Keep `proc` to reap it and read its exit code later."""
    _children[proc.pid] = proc


def proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def process_alive(pid: int, started: int | None = None) -> bool:
    """Alive and the same process (not a zombie, not a reused pid: `started` is its start time)."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: kill(0) is all we know
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return False
    return started is None or int(fields[19]) == started


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` lives (zombies do not count)."""
    for child in _children.values():
        child.poll()  # reap
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies still count for killpg; a group of zombies only is gone. The group's leader (the
    # driver's spark-submit, which lives to the end) answers without a scan of every process:
    # a stop polls this every quarter second.
    if _in_group_alive(f"/proc/{pgid}/stat", pgid):
        return True
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit() and _in_group_alive(f"{entry}/stat", pgid):
            return True
    return not Path("/proc").is_dir()


def _in_group_alive(stat_path: str, pgid: int) -> bool:
    """Whether the process of `/proc/<pid>/stat` is in group `pgid` and not a zombie."""
    try:
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return int(fields[2]) == pgid and fields[0] not in ("Z", "X")


def exit_code(pid: int) -> int | None:
    """The exit code of a child this process started and that has exited, else None."""
    child = _children.get(pid)
    return None if child is None else child.poll()


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
