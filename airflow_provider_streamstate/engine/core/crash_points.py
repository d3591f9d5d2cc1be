"""Named points where a crash test kills this process, as etcd's gofail and TiKV's fail-rs do.

The swaps that change a checkpoint in place promise what a crash at any instant leaves; a
test proves it by crashing there for real: `STREAMSTATE_CRASH_AT=<point>[,<point>...]` in
the environment of a process makes it SIGKILL itself when it reaches one of those points
(no cleanup, no `finally`, as a lost host or an OOM kill). Unset, a point costs one
environment lookup. The points are named `<operation>.<step>` and listed where they stand.
"""

from __future__ import annotations

import os
import signal

ENV = "STREAMSTATE_CRASH_AT"


def crash_point(name: str) -> None:
    """Die here, at once, when the environment names `name`."""
    armed = os.environ.get(ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
