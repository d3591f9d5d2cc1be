"""What a command costs: its wall time and the CPU seconds of every process it started,
whether it waited for them or not (a detached stream driver, a stack part, a YARN container),
and how busy the machine was meanwhile. For comparing a test module before and after a change
on a machine other work also runs on (docs/testing.md).

    .venv/bin/python dev/measure.py .venv/bin/pytest tests/integration/test_launcher.py -p no:cacheprovider

The processes are found by a marker in their environment, sampled twice a second from /proc:
one that lives less than half a second may be missed, the last half second of one is counted
short, and one that runs on after the command ended (a stack part a later run reuses) is not
counted past it. Linux only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid


def _busy() -> int:
    """Clock ticks the machine's CPUs spent on anything but idle and I/O wait."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4]


def _sample(needle: bytes, seen: dict[tuple[str, str], int]) -> None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle not in f.read():
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        key = (pid, fields[19])  # the pid and its start time: a reused pid is another process
        seen[key] = max(seen.get(key, 0), int(fields[11]) + int(fields[12]))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    marker = f"STREAMSTATE_MEASURE={uuid.uuid4().hex}"
    needle = marker.encode()
    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[tuple[str, str], int] = {}
    busy, started = _busy(), time.monotonic()
    proc = subprocess.Popen(argv, env={**os.environ, "STREAMSTATE_MEASURE": marker.split("=", 1)[1]})
    while True:
        _sample(needle, seen)
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.5)
    returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    # Each process as last sampled (the rusage wait4 gives would count again what the command
    # waited for, which the samples already hold).
    cpu = sum(seen.values()) / tick
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"measure: {wall:.0f} s wall, {cpu:.0f} CPU-s in {len(seen)} processes, machine busy "
          f"{(_busy() - busy) / tick:.0f} CPU-s, load average {load}, exit {returncode}", file=sys.stderr)
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
