"""Parts of the test stack shared by every process of one test run: the stack (Kafka broker,
moto S3 regions), s3proxy, HDFS, the YARN cluster and the Spark standalone cluster are each
started once per run, by whichever pytest-xdist worker asks first, and stopped by the last
one to let go.

Each part lives in a directory of the run's shared base temporary directory (the parent of
the workers' own), with a lock file, the JSON of the running part (`info.json`) and one file
per process holding it (`holders/<pid>`). Holding a part takes the lock, starts the part when
no live process holds it, and records this process; letting go removes the record and stops
the part when no live holder is left. A holder that died without letting go (a killed worker)
counts as gone at the next hold or release, so the part does not outlive the run.

A process lets go of a part as soon as the run is past the last test file that uses it
(`let_go`, called by tests/conftest.py): the files run in one order known to every process
(longest first), so a cluster the first files used does not idle through the rest of the run.

A part is shared only where tests cannot disturb each other through it: every test makes its
own topics, bucket prefixes, HDFS paths and applications. A test that kills or restarts a
component starts its own (e.g. the private region pair of tests/integration/conftest.py).

Tests import helpers from here, never from conftest.py (see tests/s3.py)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.stack import pid_alive  # a zombie counts as gone


def shared_root(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    """The run's base temporary directory: the xdist controller's, which holds the workers'
    own (`popen-gw<n>`), or this process's when it runs alone."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


@contextlib.contextmanager
def _locked(part_dir: Path) -> Iterator[None]:
    part_dir.mkdir(parents=True, exist_ok=True)
    with open(part_dir / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _live_holders(part_dir: Path) -> list[int]:
    """The processes holding the part; the records of dead ones are removed."""
    holders = part_dir / "holders"
    holders.mkdir(exist_ok=True)
    alive = []
    for record in holders.iterdir():
        if record.name.isdigit() and pid_alive(int(record.name)):
            alive.append(int(record.name))
        else:
            record.unlink(missing_ok=True)
    return alive


# What letting go of each part this process holds does, in order: part name -> callables.
_RELEASE_STEPS: dict[str, list[Callable[[], None]]] = {}


def held() -> list[str]:
    """The parts this process holds now."""
    return list(_RELEASE_STEPS)


def also_on_let_go(name: str, undo: Callable[[], None]) -> None:
    """Run `undo` first when this process lets go of part `name` (e.g. forget its address)."""
    _RELEASE_STEPS[name].insert(0, undo)


def let_go(name: str) -> bool:
    """Let go of part `name` now, if this process holds it (the last holder stops it); whether
    it held it. For a run past the last test that uses the part: the session fixture that
    holds it must not be used after."""
    steps = _RELEASE_STEPS.pop(name, None)
    for step in steps or ():
        step()
    return steps is not None


def hold(root: Path, name: str, start: Callable[[Path], dict[str, Any]], stop: Callable[[Path], None]
         ) -> Iterator[dict[str, Any]]:
    """Yield the JSON of part `name` (`start(dir)` returns it; `stop(dir)` ends it), started
    if no live process of the run holds it, stopped after if none holds it any more (at the
    end, or at `let_go(name)`). For a session fixture: `yield from hold(...)`."""
    part_dir = root / "shared" / name
    info_file = part_dir / "info.json"
    me = os.getpid()
    with _locked(part_dir):
        if not (_live_holders(part_dir) and info_file.exists()):
            stop(part_dir)  # a part whose holders all died, or one half started
            info_file.unlink(missing_ok=True)
            info = start(part_dir)
            info_file.write_text(json.dumps(info))
        (part_dir / "holders" / str(me)).touch()
        info = json.loads(info_file.read_text())

    def release() -> None:
        with _locked(part_dir):
            (part_dir / "holders" / str(me)).unlink(missing_ok=True)
            if not _live_holders(part_dir):
                info_file.unlink(missing_ok=True)
                stop(part_dir)

    _RELEASE_STEPS[name] = [release]
    try:
        yield info
    finally:
        let_go(name)
