"""Named points where a test kills or holds this process, as etcd's gofail and TiKV's
fail-rs do.

The swaps that change a checkpoint in place promise what a crash at any instant leaves; a
test proves it by crashing there for real: `STREAMSTATE_CRASH_AT=<point>[,<point>...]` in
the environment of a process makes it SIGKILL itself when it reaches one of those points
(no cleanup, no `finally`, as a lost host or an OOM kill). `STREAMSTATE_PAUSE_AT=<point>`
with `STREAMSTATE_PAUSE_FILE=<path>` holds it there instead, until `<path>` exists (it
writes `<path>.paused` when it arrives): what a race test needs to act in between. Unset, a
point costs one environment lookup. Points are named `<operation>.<step>` where they stand.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ENV = "STREAMSTATE_CRASH_AT"
ENV_PAUSE = "STREAMSTATE_PAUSE_AT"
ENV_PAUSE_FILE = "STREAMSTATE_PAUSE_FILE"


def crash_point(name: str) -> None:
    """Die here at once, or wait here, when the environment names `name`."""
    armed = os.environ.get(ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
    paused = os.environ.get(ENV_PAUSE)
    if paused and name in paused.split(",") and os.environ.get(ENV_PAUSE_FILE):
        resume = Path(os.environ[ENV_PAUSE_FILE])
        Path(f"{resume}.paused").write_text(name)
        while not resume.exists():
            time.sleep(0.1)
