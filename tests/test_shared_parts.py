"""The parts the test processes of one run share (tests/shared_parts.py): started by the first
process that holds one, reused by the others, stopped by the last to let go, and started
afresh when every process that held it died without letting go."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests import shared_parts

REPO = Path(__file__).resolve().parent.parent

# Another test process: holds part `p` of `root` (its start and stop append to `log`), says
# so in `held`, lets go when `release` appears, or dies holding it with `die`.
HOLDER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.test_shared_parts import starter, stopper
from tests import shared_parts
root, log, mode = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
holder = shared_parts.hold(root, "p", starter(log), stopper(log))
next(holder)
(root / "held").touch()
if mode == "die":
    os._exit(0)
while not (root / "release").exists():
    time.sleep(0.05)
next(holder, None)
"""


def starter(log: Path) -> Any:
    def start(part_dir: Path) -> dict[str, Any]:
        with log.open("a") as f:
            f.write("start\n")
        return {"started_in": str(part_dir)}
    return start


def stopper(log: Path) -> Any:
    def stop(part_dir: Path) -> None:
        with log.open("a") as f:
            f.write("stop\n")
    return stop


def _other_process(root: Path, log: Path, mode: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(REPO), str(root), str(log), mode])
    deadline = time.monotonic() + 60
    while not (root / "held").exists():
        assert proc.poll() in (None, 0) and time.monotonic() < deadline, "the other process never held the part"
        time.sleep(0.05)
    return proc


def test_a_part_is_started_once_reused_by_another_process_and_stopped_by_the_last_to_let_go(tmp_path: Path) -> None:
    log = tmp_path / "log"
    other = _other_process(tmp_path, log, "hold")
    assert log.read_text() == "stop\nstart\n"  # a stale part is stopped before the first start
    mine = shared_parts.hold(tmp_path, "p", starter(log), stopper(log))
    assert next(mine) == {"started_in": str(tmp_path / "shared" / "p")}
    next(mine, None)  # let go: the other process still holds it
    assert log.read_text() == "stop\nstart\n"
    (tmp_path / "release").touch()
    assert other.wait(60) == 0
    assert log.read_text() == "stop\nstart\nstop\n"
    assert not (tmp_path / "shared" / "p" / "info.json").exists()


def test_a_part_whose_holders_all_died_is_stopped_and_started_again(tmp_path: Path) -> None:
    log = tmp_path / "log"
    assert _other_process(tmp_path, log, "die").wait(60) == 0
    assert json.loads((tmp_path / "shared" / "p" / "info.json").read_text())  # left behind by the dead holder
    mine = shared_parts.hold(tmp_path, "p", starter(log), stopper(log))
    next(mine)
    assert log.read_text() == "stop\nstart\nstop\nstart\n"
    next(mine, None)
    assert log.read_text() == "stop\nstart\nstop\nstart\nstop\n"


def test_a_part_let_go_early_is_stopped_by_the_last_holder_and_its_undo_runs_once(tmp_path: Path) -> None:
    log, undone = tmp_path / "log", []
    mine = shared_parts.hold(tmp_path, "p", starter(log), stopper(log))
    next(mine)
    shared_parts.also_on_let_go("p", lambda: undone.append("p"))
    assert "p" in shared_parts.held()  # beside what this test process holds for other tests
    assert shared_parts.let_go("p") and not shared_parts.let_go("p")
    assert log.read_text() == "stop\nstart\nstop\n" and undone == ["p"] and "p" not in shared_parts.held()
    next(mine, None)  # the session's end: nothing more to let go of
    assert log.read_text() == "stop\nstart\nstop\n" and undone == ["p"]
    assert not (tmp_path / "shared" / "p" / "info.json").exists()
