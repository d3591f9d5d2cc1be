"""A driver's log on the launching host: its telling error line, and how many are kept.

The launcher writes each launch's spark-submit output to a log file (and secret confs to a
properties file beside it); a dead driver's status and a failed state job name the log's
last error line. Pure Python.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

KEEP_LOGS = 10  # per checkpoint; older launches' logs are deleted at launch
_ERROR_LINE = re.compile(r"\w*(?:Exception|Error)\b|\berror: ")  # the last for argparse
_PY_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Exception|Error|Exit|Interrupt)\b(?::|$)")


def last_error_line(log_path: str | Path | None, *, tail_bytes: int = 512 * 1024) -> str | None:
    """The most telling error line at the end of a driver log: the last Python exception
    line (`pyspark.errors....StreamingQueryException: ...`) if any, else the last line
    naming an Exception or Error."""
    if not log_path:
        return None
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for pattern in (_PY_EXCEPTION_LINE, _ERROR_LINE):
        for line in reversed(lines):
            if pattern.search(line):
                return line.strip()[:1000]
    return None


def prune_logs(logs: Path) -> None:
    """Keep the newest KEEP_LOGS - 1 logs in `logs` (room for the next one), and drop
    properties files of secrets older than an hour."""
    try:
        old = sorted(logs.glob("*.log"), key=lambda p: p.stat().st_mtime)
        # A launch's secrets file that nobody deleted (its driver died before Python started,
        # and nobody waited for it): Spark has long read it.
        stale = [p for p in logs.glob("*.properties") if time.time() - p.stat().st_mtime > 3600]
    except OSError:
        return
    for path in [*old[: max(0, len(old) - (KEEP_LOGS - 1))], *stale]:
        path.unlink(missing_ok=True)
