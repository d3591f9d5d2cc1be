"""An operation on a stream resolves its checkpoint once: the Airflow connection is looked
up once and the location opened once, and the opened checkpoint is handed to every step
(the stop and the run of its planned batch, a supervision round and its restart, from a
task and from `streamstate stream`, a sensor's poke, the Streams page's state of a stream,
`streamstate stream status`, a transform's snapshot, plan and edit, from a task and from
`streamstate state edit`, a clone's restore and its start). Counted on real local
checkpoints, at the two places every opening goes through."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import airflow_provider_streamstate.engine.checkpoint.filesystems as filesystems
import airflow_provider_streamstate.hooks.store as store_hook
from airflow_provider_streamstate.cli.main import main
from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.edit.changes import EditSpec
from airflow_provider_streamstate.engine.kafka.offsets import PartitionOffsets
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup.digest import state_digest
from airflow_provider_streamstate.engine.overview.streams import stream_state
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.stores.backends import backend_for
from airflow_provider_streamstate.engine.streams.health import check_lag, check_progress
from airflow_provider_streamstate.operators.edit import StateEditOperator
from airflow_provider_streamstate.operators.stream import CloneStreamOperator, StopStreamOperator
from airflow_provider_streamstate.operators.supervise import SuperviseStreamOperator
from airflow_provider_streamstate.sensors.stream import StreamProgressSensor
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.streams.edit import edit_spec
from airflow_provider_streamstate.streams.start import put_back
from tests.edits import work_copy
from tests.goldens import goldens
from tests.unit.fake_checkpoint import make_checkpoint


@dataclass
class Openings:
    """How often the checkpoint's connection was looked up and its location opened."""

    lookups: int = 0
    opened: int = 0
    stores: int = 0  # the spec's store built (StreamstateStoreHook.store)


@pytest.fixture
def openings(monkeypatch: pytest.MonkeyPatch) -> Openings:
    counts = Openings()
    local = backend_for("file")
    assert local is not None and local.open_checkpoint is not None
    open_local = local.open_checkpoint
    look_up = store_hook.checkpoint_connection

    def opened(*args: Any, **kwargs: Any) -> Any:
        counts.opened += 1
        return open_local(*args, **kwargs)

    def looked_up(*args: Any, **kwargs: Any) -> Any:
        counts.lookups += 1
        return look_up(*args, **kwargs)

    class CountedHook(store_hook.StreamstateStoreHook):
        @property
        def store(self) -> Any:
            counts.stores += 1
            return super().store

    monkeypatch.setattr(store_hook, "StreamstateStoreHook", CountedHook)
    counted = replace(local, open_checkpoint=opened)
    monkeypatch.setattr(filesystems, "backend_for", lambda scheme: counted if scheme == "file" else backend_for(scheme))
    monkeypatch.setattr(store_hook, "checkpoint_connection", looked_up)
    monkeypatch.setenv("STREAMSTATE_UNMANAGED_WINDOW_S", "0")  # the synthetic checkpoint was written just now
    return counts


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[Path]:
    yield make_checkpoint(tmp_path / "orders", batches=3)


def spec_of(checkpoint: Path) -> StreamSpec:
    # The stream cannot be launched (no such Spark connection): a start fails once it has
    # read the records beside the checkpoint, before anything runs.
    return StreamSpec(name="orders", checkpoint=str(checkpoint), store=f"file://{checkpoint.parent / 'store'}",
                      application=str(checkpoint.parent / "orders.py"), spark_conn_id="spark_nowhere")


class RecordingTI:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def test_a_stop_that_finishes_the_planned_batch_opens_the_checkpoint_once(checkpoint: Path, openings: Openings) -> None:
    stop = StopStreamOperator(task_id="stop", stream=spec_of(checkpoint).to_dict(), timeout=5,
                              finish_planned_batch=True)
    out = stop.execute({"ti": RecordingTI()})
    assert (out["outcome"], out["finished_planned_batch"]) == ("not-running", None)  # batch 2 is committed
    assert (openings.lookups, openings.opened) == (1, 1)


def streamstate(*argv: str) -> tuple[int, dict[str, Any]]:
    """`streamstate ARGV --json`: its exit code and the document it printed."""
    with redirect_stdout(io.StringIO()) as out:
        code = main([*argv, "--json"])
    return code, json.loads(out.getvalue())


def test_streamstate_stream_stop_finishing_the_planned_batch_opens_the_checkpoint_once(
        checkpoint: Path, openings: Openings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # what the command sets, undone after
    code, out = streamstate("stream", "stop", "--spec", json.dumps(spec_of(checkpoint).to_dict()), "--timeout", "5",
                            "--finish-planned-batch")
    assert (code, out["outcome"], out["finished_planned_batch"]) == (0, "not-running", None)  # batch 2 is committed
    assert (openings.lookups, openings.opened) == (1, 1)


@pytest.fixture
def failed(checkpoint: Path) -> Path:
    """The checkpoint of a stream whose query failed (its driver's last beat says so)."""
    write_heartbeat(checkpoint, Heartbeat(query_id="q-1", run_id="r-1", query_name="orders", host="elsewhere",
                                          pid=4242, state="failed", batch_id=2, input_rows=10, updated_at=now_iso(),
                                          interval_s=1.0, exception="ZeroDivisionError: division by zero"))
    return checkpoint


def test_a_supervision_round_and_its_restart_open_the_checkpoint_once(failed: Path, openings: Openings) -> None:
    supervise = SuperviseStreamOperator(task_id="supervise", stream=spec_of(failed).to_dict(), settle=1)
    with pytest.raises(AirflowFailException, match="its restart failed: .*spark_nowhere"):
        supervise.execute({"ti": RecordingTI()})
    assert (openings.lookups, openings.opened) == (1, 1)


def test_streamstate_stream_supervise_opens_the_checkpoint_once_for_its_round_and_restart(
        failed: Path, openings: Openings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # what the command sets, undone after
    code = main(["stream", "supervise", "--spec", json.dumps(spec_of(failed).to_dict()), "--settle", "1"])
    assert code != 0 and "spark_nowhere" in capsys.readouterr().err  # restarted; the start failed before it launched
    assert (openings.lookups, openings.opened) == (1, 1)


def test_a_progress_sensors_poke_opens_the_checkpoint_once(checkpoint: Path, openings: Openings) -> None:
    sensor = StreamProgressSensor(task_id="progress", stream=spec_of(checkpoint).to_dict())
    assert sensor.poke({}).is_done  # batch 2 is committed
    assert (openings.lookups, openings.opened) == (1, 1)


def caught_up(committed: dict[str, dict[str, int]]) -> list[PartitionOffsets]:
    """A broker whose end offsets are where the checkpoint's newest batch read up to."""
    return [PartitionOffsets(topic, int(p), offset, 0, offset) for topic, parts in committed.items()
            for p, offset in parts.items()]


@pytest.mark.parametrize("read", [
    lambda c: stream_state(c),
    lambda c: check_progress(c),
    lambda c: check_lag(c, max_lag=0, broker_offsets=caught_up),
], ids=["stream-state", "progress", "lag"])
def test_a_checkpoint_given_as_a_location_is_opened_once_per_read(checkpoint: Path, openings: Openings,
                                                                   read: Any) -> None:
    read(str(checkpoint))
    assert openings.opened == 1


def test_stream_status_opens_the_checkpoint_once(checkpoint: Path, openings: Openings) -> None:
    with redirect_stdout(io.StringIO()) as out:
        assert main(["stream", "status", "--checkpoint", str(checkpoint), "--json"]) == 0
    assert '"checkpoint_problem": null' in out.getvalue()
    assert openings.opened == 1


@pytest.fixture
def golden_spec(tmp_path: Path) -> tuple[StreamSpec, str]:
    """A stopped stream on a copy of a golden checkpoint (Spark 4.1, HDFS-backed state), and a key of its state."""
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = Path(work_copy(g, tmp_path))
    return replace(spec_of(work), checkpoint=str(work)), g.state().rows[0].key_input


@pytest.mark.parametrize("verify", ["changes", "state"])
def test_an_edit_in_place_opens_the_checkpoint_and_builds_the_store_once_its_proof_included(
        golden_spec: tuple[StreamSpec, str], openings: Openings, verify: str) -> None:
    spec, key = golden_spec
    done = edit_spec(spec, EditSpec.from_json({"delete": [key]}), apply=True, spark_check=False, parallelism=1,
                     verify=verify)
    assert done.pinned and done.preview.changed == 1 and done.verified["by"] == verify
    assert (openings.lookups, openings.opened, openings.stores) == (1, 1, 1)


def test_a_put_back_restores_and_starts_through_one_opened_checkpoint(golden_spec: tuple[StreamSpec, str],
                                                                      openings: Openings) -> None:
    spec, key = golden_spec
    done = edit_spec(spec, EditSpec.from_json({"delete": [key]}), apply=True, spark_check=False, parallelism=1)
    openings.lookups = openings.opened = 0
    with pytest.raises(UsageError, match="spark_nowhere"):  # restored; the start fails before it launches
        put_back(spec, done.pinned, start=True, requested_by="test rollback", log=logging.getLogger("test"))
    assert state_digest(spec.checkpoint).batch_id == done.edit_batch - 1  # the edit's batch is gone
    assert (openings.lookups, openings.opened) == (1, 1 + 1)  # the put back's, and this test's digest


@pytest.mark.parametrize("apply", [False, True], ids=["dry-run", "applied-in-place"])
def test_a_transform_edit_snapshots_plans_and_edits_through_one_opened_checkpoint(
        golden_spec: tuple[StreamSpec, str], openings: Openings, apply: bool) -> None:
    spec, _ = golden_spec
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    (field,) = g.state().types["value"].names
    top = max(r.value[0] for r in g.state().rows)

    def drop_top(key: dict[str, Any], value: dict[str, Any]) -> dict[str, Any] | None:
        return None if value[field] == top else value

    edit = StateEditOperator(task_id="edit", stream=spec.to_dict(), transform=drop_top, apply=apply,
                             spark_check=False, parallelism=1)
    out = edit.execute({})
    assert out["dry_run"] is not apply and out["preview"]["changed"] == 1
    assert (openings.lookups, openings.opened, openings.stores) == (1, 1, 1)



def test_streamstate_state_edit_applies_a_transform_through_one_opened_checkpoint(
        golden_spec: tuple[StreamSpec, str], openings: Openings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, _ = golden_spec
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    (field,) = g.state().types["value"].names
    top = max(r.value[0] for r in g.state().rows)
    (tmp_path / "fixes_for_opened_once.py").write_text(f"def halve(key, value):\n    return {{'{field}': value['{field}'] // 2}}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # what the command sets, undone after
    code, out = streamstate("state", "edit", "--spec", json.dumps(spec.to_dict()), "--transform",
                            "fixes_for_opened_once:halve", "--where", f"{field} >= {top}", "--apply", "--no-spark-check",
                            "--parallelism", "1")
    assert (code, out["preview"]["changed"], out["dry_run"]) == (0, 1, False)
    assert (openings.lookups, openings.opened) == (1, 1)

def test_a_clone_started_at_once_is_restored_and_started_through_one_opened_checkpoint(
        golden_spec: tuple[StreamSpec, str], openings: Openings, tmp_path: Path) -> None:
    spec, _ = golden_spec
    create_snapshot(spec.checkpoint, open_store(spec.store), spec.name)
    clone = CloneStreamOperator(task_id="clone", stream=spec.to_dict(), clone_name="orders-clone",
                                clone_checkpoint=str(tmp_path / "clone"), sinks={}, start=True, parallelism=1)
    openings.lookups = openings.opened = 0
    with pytest.raises(AirflowFailException, match="spark_nowhere"):  # restored; the start fails before it launches
        clone.execute({"ti": RecordingTI()})
    assert (tmp_path / "clone" / "_streamstate" / "clone.json").is_file()
    assert (openings.lookups, openings.opened) == (1, 1)
