"""The demos' terminal: their own lines only. Everything else the process and what it starts
write on stdout and stderr (Airflow's DagBag lines, Spark's and py4j's WARN lines, the
stack's servers) goes to the log file the demo names when it starts.

`quiet(log)` moves file descriptors 1 and 2 onto the log (so the JVMs and subprocesses
follow), keeping the terminal for `say()`. `STREAMSTATE_DEMO_VERBOSE=1` leaves everything
on the terminal.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

_terminal: TextIO | None = None


def quiet(log: Path) -> Path:
    """From now on only `say()` reaches the terminal; the rest goes to `log` (appended)."""
    global _terminal
    if _terminal is not None or os.environ.get("STREAMSTATE_DEMO_VERBOSE") == "1":
        return log
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    _terminal = os.fdopen(os.dup(1), "w", buffering=1)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return log


def say(*args: Any, **kwargs: Any) -> None:
    """One of the demo's own lines, on the terminal (and in the log, for context)."""
    kwargs.pop("flush", None)
    if _terminal is not None:
        print(*args, file=_terminal, flush=True, **kwargs)
    print(*args, flush=True, **kwargs)
