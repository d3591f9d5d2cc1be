"""Whether a stream's process group still lives: asked every quarter second while a stop
waits for the driver to exit. The group's leader answers first; a group whose leader is gone
lives while any other member does; zombies do not count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from airflow_provider_streamstate.engine.streams.processes import group_alive


def _until(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_group_lives_while_its_leader_does_and_not_after() -> None:
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert group_alive(leader.pid)
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
    assert not group_alive(leader.pid)


def test_a_group_whose_leader_exited_lives_while_another_member_does() -> None:
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!"], start_new_session=True, stdout=subprocess.PIPE,
                              text=True)
    member = int(leader.stdout.readline())  # type: ignore[union-attr]
    leader.wait()
    try:
        assert group_alive(leader.pid)
    finally:
        os.kill(member, signal.SIGKILL)
    assert _until(lambda: not group_alive(leader.pid))


def test_a_group_of_a_zombie_leader_only_is_gone() -> None:
    leader = subprocess.Popen(["sh", "-c", "exit 0"], start_new_session=True)
    try:
        assert _until(lambda: not group_alive(leader.pid))
        assert leader.returncode is None  # not reaped: a zombie still in the group
    finally:
        leader.wait()
