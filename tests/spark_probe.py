"""tests/apps/repartition_probe.py's commands in a Spark process kept for a test file: one
per Spark line and environment, serving the file's requests one after another (`serve`),
each request in a new session of its one SparkContext (SQL confs its own).

A JVM start is the dearest part of a probe step (about 15 CPU-s of a short driver here):
a file that ran a plain Spark query, edited its checkpoint, ran it again and read its state
started a process for each. What the tests check is Spark's reading of the checkpoint's
files, and every query of a request is a new run of the query (a new run id: Spark loads
its state stores from the checkpoint, not from a store an earlier run left loaded), so
sharing the JVM changes nothing they prove; after each request the process stops its
queries and unloads its state stores, as its exit did (no maintenance of them writes in a
checkpoint afterwards). A request that failed, or that the test left unfinished (it failed
between answers), takes its process with it; the file's processes end with the file
(tests/conftest.py), or an idle one IDLE_S after its last request (a process near that is
not given another).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dev import spark_versions

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps", "repartition_probe.py")
IDLE_S = 600
END = "__probe__"  # the key of a request's last line: {END: "done"} or {END: "error", "error": ...}
# What tests set per test that the probe never reads: a process is kept across them.
PER_TEST = frozenset({"PYTEST_CURRENT_TEST", "STREAMSTATE_HOME", "STREAMSTATE_UNMANAGED_WINDOW_S"})


class ProbeProcess:
    """One `serve` process of a Spark line, with the environment it was started with."""

    def __init__(self, line: spark_versions.SparkVersion, env: Mapping[str, str]) -> None:
        self.log = tempfile.NamedTemporaryFile("a+b", prefix="probe-", suffix=".log")  # noqa: SIM115 - read on failure
        self.proc = subprocess.Popen([str(line.python), APP, "serve", str(IDLE_S)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=dict(env))
        self.pending = bytearray()
        self.busy = False  # a request whose end was not read yet, or that failed: not to be reused
        self.last_used = time.monotonic()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def errors(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:].decode(errors="replace")

    def idle_too_long(self) -> bool:
        """Near IDLE_S since its last request: it may be quitting as a new one is sent."""
        return time.monotonic() - self.last_used > IDLE_S - 120

    def send(self, commands: Sequence[Sequence[str]]) -> None:
        assert self.proc.stdin is not None
        self.busy = True
        self.last_used = time.monotonic()
        self.proc.stdin.write((json.dumps([list(c) for c in commands]) + "\n").encode())
        self.proc.stdin.flush()

    def read_json(self, timeout: float) -> Any:
        """The next JSON line the process printed (Spark prints other lines too)."""
        assert self.proc.stdout is not None
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + timeout
        while True:
            while b"\n" not in self.pending:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    self.kill()
                    raise AssertionError(f"the probe gave no answer in {timeout:.0f} s: {self.errors()}")
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise AssertionError(f"the probe ended (exit {self.proc.wait()}): {self.errors()}")
                self.pending += chunk
            line, _, rest = bytes(self.pending).partition(b"\n")
            self.pending[:] = rest
            if line.startswith((b"{", b"[")):
                return json.loads(line)

    def request_end(self) -> dict[str, Any] | None:
        """The request's last line if it has come (read without waiting), else None."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            self.pending += chunk
        for line in bytes(self.pending).split(b"\n")[:-1]:
            if line.startswith(b"{") and END.encode() in line:
                got = json.loads(line)
                if isinstance(got, dict) and END in got:
                    return got
        return None

    def close(self) -> None:
        """Let it stop its SparkContext (stdin closed), or kill it if it does not in time; a
        busy one (it would not read stdin) at once."""
        if self.busy:
            self.kill()
        if self.alive() and self.proc.stdin is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


_PROCESSES: dict[tuple[str, tuple[tuple[str, str], ...]], ProbeProcess] = {}


def process_for(line: spark_versions.SparkVersion, env: Mapping[str, str]) -> ProbeProcess:
    """The file's process of `line` started with `env` (but for PER_TEST), a new one if it
    has none, it ended, it is near its idle exit, or its last request failed or was left
    unfinished."""
    key = (str(line.python), tuple(sorted((k, v) for k, v in env.items() if k not in PER_TEST)))
    found = _PROCESSES.get(key)
    if found is not None and (found.busy or not found.alive() or found.idle_too_long()):
        found.close()
        found = None
    if found is None:
        found = _PROCESSES[key] = ProbeProcess(line, env)
    return found


def close_all() -> None:
    """End every kept process (a file's last test is done)."""
    while _PROCESSES:
        _, process = _PROCESSES.popitem()
        process.close()


class ProbeRun:
    """One request's answers, read as they come: a test may act between them (the probe's
    `wait` command holds the request until a file appears)."""

    def __init__(self, line: spark_versions.SparkVersion, *commands: Sequence[str],
                 env: Mapping[str, str] | None = None) -> None:
        self.process = process_for(line, line.env() if env is None else env)
        self.left = len(commands)
        self.process.send(commands)

    def running(self) -> bool:
        """The request is still running: its process is alive and has not ended it."""
        return self.process.alive() and self.process.request_end() is None

    def errors(self) -> str:
        """The process's stderr (its end), and the request's error if it ended with one."""
        end = self.process.request_end()  # also after the process died: its last lines are read
        return f"{end.get('error', '') if end else ''}\n{self.process.errors()}"

    def answer(self, timeout: float = 600) -> Any:
        """The next command's answer."""
        got = self.process.read_json(timeout)
        if isinstance(got, dict) and END in got:  # the process stays busy: it is not reused
            raise AssertionError(f"the probe's request ended with {self.left} answer(s) to come: "
                                 f"{got.get('error') or got}\n{self.process.errors()}")
        self.left -= 1
        return got

    def finish(self, timeout: float = 600) -> None:
        """The request's end, after every answer was read."""
        got = self.process.read_json(timeout)
        assert isinstance(got, dict) and got.get(END) == "done", f"{got}\n{self.process.errors()}"
        self.process.busy = False
        self.process.last_used = time.monotonic()


def probe(line: spark_versions.SparkVersion, *commands: Sequence[str], env: Mapping[str, str] | None = None,
          timeout: float = 900) -> list[Any]:
    """The commands, in order, in the file's Spark process of `line`: each one's JSON answer."""
    run = ProbeRun(line, *commands, env=env)
    answers = [run.answer(timeout) for _ in commands]
    run.finish(timeout)
    return answers
