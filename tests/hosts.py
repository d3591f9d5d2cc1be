"""Other hosts on this machine, for tests of what must work when Airflow tasks run on
different workers: a process in its own PID, UTS (hostname) and mount namespaces
(`unshare`, as root), with a home of its own on a private tmpfs (so `~/.streamstate`, where
a host keeps driver logs and launch locks, is its own) and a private tmpfs over this
host's `~/.streamstate`. It sees neither the test's processes nor their host-local files;
it reaches the stack's services on 127.0.0.1 and the paths a shared mount would give it
(the interpreter lives below /root here, so /root itself stays visible)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest


def require_namespaces() -> None:
    """Skip unless this process may create namespaces (root, unshare present)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("simulated hosts need root and unshare (CI runs as root)")


def on_host(name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            **popen: object) -> subprocess.Popen[str]:
    """Start `argv` as the only process tree of host `name` (its pid 1's child)."""
    require_namespaces()
    home = Path("/run/streamstate-hosts") / name
    ours = Path(os.environ.get("HOME", "/root")) / ".streamstate"
    home.mkdir(parents=True, exist_ok=True)
    ours.mkdir(parents=True, exist_ok=True)
    # Its name resolves (Hadoop's and Spark's clients look their own host up), in its own /etc/hosts.
    hosts = Path("/run/streamstate-hosts") / f"{name}.hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {name}\n")
    script = (f"hostname {shlex.quote(name)} && mount -t tmpfs tmpfs {shlex.quote(str(home))} && "
              f"mount -t tmpfs tmpfs {shlex.quote(str(ours))} && mount --bind {shlex.quote(str(hosts))} /etc/hosts && "
              f"cd / && exec {shlex.join(list(argv))}")
    full_env = {**os.environ, **(env or {}), "HOME": str(home)}
    full_env.pop("STREAMSTATE_HOME", None)
    return subprocess.Popen(["unshare", "--pid", "--uts", "--mount", "--fork", "--mount-proc", "sh", "-c", script],
                            env=full_env, text=True, **popen)  # type: ignore[call-overload]


def python_on_host(name: str, script: Path, *args: str, env: Mapping[str, str] | None = None,
                   **popen: object) -> subprocess.Popen[str]:
    """This interpreter running `script` on host `name`."""
    return on_host(name, [sys.executable, str(script), *args], env=env, **popen)
