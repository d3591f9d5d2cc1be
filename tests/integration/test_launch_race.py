"""One driver per checkpoint, whichever hosts start it: two simulated hosts (own PID, UTS and
mount namespaces: tests/hosts.py) start the same stream at the same instant, round after
round, on S3 checkpoints and on a checkpoint on a shared mount. Each launch is recorded as
generation N with a create-only write (S3 `If-None-Match: *`, a hard link on a mount), so
exactly one start wins every round, the other is refused, and exactly one driver runs."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
from airflow_provider_streamstate.engine.streams.records import launch_generations, read_launch
from tests.hosts import python_on_host, require_namespaces
from tests.s3 import s3_client

pytestmark = pytest.mark.integration

AGENT = Path(__file__).resolve().parent.parent / "apps" / "launch_agent.py"
ROUNDS = 20  # per kind of checkpoint


def test_two_hosts_starting_one_stream_at_once_start_exactly_one_driver_every_round(stack, tmp_path: Path) -> None:
    require_namespaces()
    bucket = stack.s3["primary"]["bucket"]
    base = f"race/{uuid.uuid4().hex[:10]}"
    checkpoints = []
    for i in range(ROUNDS):
        checkpoints.append(f"s3a://{bucket}/{base}/ckpt-{i}")
        checkpoints.append(str(tmp_path / "shared-mount" / f"ckpt-{i}"))
    env = stack.s3_env("primary")
    period = 1.2
    t0 = time.time() + 12  # both agents import the engine first
    agents = [python_on_host(host, AGENT, str(t0), str(period), *checkpoints, env=env, stdout=-1, stderr=-1)
              for host in ("worker-a", "worker-b")]
    outputs: dict[int, tuple[str, str]] = {}

    def collect(i: int) -> None:
        outputs[i] = agents[i].communicate(timeout=t0 - time.time() + period * len(checkpoints) + 120)

    readers = [threading.Thread(target=collect, args=(i,)) for i in range(2)]
    for r in readers:
        r.start()
    for r in readers:
        r.join()
    rows = []
    for i, agent in enumerate(agents):
        assert agent.returncode == 0, outputs[i][1][-3000:]
        rows += [json.loads(line) for line in outputs[i][0].splitlines()]
    assert {r["host"] for r in rows} == {"worker-a", "worker-b"}  # each ran as its own host

    time.sleep(3)  # the winners' drivers leave their mark after 1.5 s
    client = s3_client(stack)
    lost_by_claim = 0
    for i, checkpoint in enumerate(checkpoints):
        won = [r for r in rows if r["round"] == i and r["won"]]
        lost = [r for r in rows if r["round"] == i and not r["won"]]
        assert len(won) == 1 and len(lost) == 1, (checkpoint, won, lost)
        assert won[0]["generation"] == 1
        assert "a second copy would corrupt it" in lost[0]["error"]
        lost_by_claim += "claimed" in lost[0]["error"]
        side = open_sidecar(open_checkpoint_fs(checkpoint, connection=client))
        drivers = side.names("_race")
        assert len(drivers) == 1 and drivers[0].startswith(won[0]["host"]), (checkpoint, drivers)
        assert launch_generations(side) == [1]
        assert read_launch(side).handle.launch_id == won[0]["launch_id"]
    print(f"\n{len(checkpoints)} rounds: {lost_by_claim} decided by the create-only write, "
          f"{len(checkpoints) - lost_by_claim} by the winner's record seen first")


def test_of_local_writers_racing_to_create_one_record_exactly_one_wins(tmp_path: Path) -> None:
    """The hard link of a complete temp file is create-only: no writer replaces another's."""
    side = open_sidecar(tmp_path)

    def create(n: int, rel: str, barrier: threading.Barrier, results: list[bool]) -> None:
        barrier.wait()
        results.append(side.create(rel, f"writer {n}".encode()))

    for round_ in range(50):
        results: list[bool] = []
        barrier = threading.Barrier(8)
        rel = f"launches/{round_:08d}.json"
        threads = [threading.Thread(target=create, args=(n, rel, barrier, results)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False] * 7 + [True]
        assert side.read(f"launches/{round_:08d}.json", limit=100).startswith(b"writer ")
    assert not [p for p in (tmp_path / "launches").iterdir() if p.name.startswith(".")]  # no temp file left
