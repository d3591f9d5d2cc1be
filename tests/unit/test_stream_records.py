"""engine/streams/records.py: what is written beside a checkpoint about the stream on it.
Handles and clone labels round-trip; a stop request is seen only by drivers started before
it; the newest launch generation is the launch (a release's single record still reads), and
a superseded one is named; the supervised driver (jobs/supervised.py) refuses to start under
a superseded launch and records what it died of for every host."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint import sidecar
from airflow_provider_streamstate.engine.checkpoint.liveness import now_iso
from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams import clones, launcher, records


def test_a_stop_request_is_seen_only_by_drivers_started_before_it(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    before = datetime.now(UTC) - timedelta(seconds=5)
    open_sidecar(checkpoint).write(records.STOP_FILE, (
        f'{{"format": "{records.STOP_FORMAT}", "requested_at": "{now_iso()}", "by": "task stop"}}').encode())
    assert records.stop_requested(checkpoint, since=before) == f"stop requested by task stop at {_requested(checkpoint)}"
    assert records.stop_requested(checkpoint, since=datetime.now(UTC) + timedelta(seconds=5)) is None


def _requested(checkpoint: Path) -> str:
    import json

    return json.loads((checkpoint / records.STOP_FILE).read_text())["requested_at"]


def test_records_and_clone_labels_round_trip(tmp_path: Path) -> None:
    handle = records.StreamHandle("orders", "/c", "L1", 42, "h", "/c/x.log", now_iso())
    assert records.StreamHandle.from_json({**handle.to_json(), "query_id": "q", "reconnected": True}) == handle
    with pytest.raises(UsageError, match="not a stream handle"):
        records.StreamHandle.from_json({"stream": "orders"})

    label = clones.CloneLabel.new(clone="orders-sandbox", source_stream="orders", source_checkpoint="/c",
                                    snapshot_id="s1", batch_id=7, query_id="q2", sinks={"alerts": "a2"}, ttl_s=60)
    clones.write_clone_label(tmp_path, label)
    assert clones.read_clone_label(tmp_path) == label
    assert not label.expired() and label.expired(datetime.now(UTC) + timedelta(seconds=61))


def _record(ckpt: Path, generation: int, launch_id: str) -> None:
    handle = records.StreamHandle("orders", str(ckpt), launch_id, 4242, "elsewhere", "", now_iso(), generation)
    open_sidecar(ckpt).create(f"{sidecar.LAUNCHES_DIR}/{generation:08d}.json",
                              records.LaunchRecord(handle, ["spark-submit"], 4242, None).to_json())


def test_the_newest_generation_is_the_launch_and_old_records_still_read(tmp_path: Path) -> None:
    from tests.unit.fake_checkpoint import write

    legacy = records.LaunchRecord(records.StreamHandle("orders", str(tmp_path), "L-0", 4242, "h", "", now_iso()),
                                   ["spark-submit"], 4242, None)
    write(tmp_path / records.LAUNCH_FILE, legacy.to_json())
    assert records.read_launch(tmp_path).handle.launch_id == "L-0"  # a release before generations
    _record(tmp_path, 1, "L-1")
    _record(tmp_path, 2, "L-2")
    assert records.launch_generations(tmp_path) == [1, 2]
    got = records.read_launch(tmp_path).handle
    assert (got.launch_id, got.generation) == ("L-2", 2)
    assert launcher.superseded_by(tmp_path, 1).handle.launch_id == "L-2"
    assert launcher.superseded_by(tmp_path, 2) is None
    assert launcher.superseded_by(tmp_path, 3) is None  # its own record is not written yet


def test_a_driver_whose_launch_was_superseded_refuses_to_start_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_streamstate.jobs import supervised

    _record(tmp_path, 1, "L-1")
    _record(tmp_path, 2, "L-2")
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('the application must not run')\n")
    monkeypatch.setenv(launcher.ENV_CHECKPOINT, str(tmp_path))
    monkeypatch.setenv(launcher.ENV_LAUNCH_ID, "L-1")
    monkeypatch.setenv(launcher.ENV_LAUNCH_GENERATION, "1")
    assert supervised.main([str(app)]) == 3
    assert records.read_driver(tmp_path) is None


def test_what_a_driver_died_of_is_recorded_beside_the_checkpoint_for_every_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its log is on the host that launched it; the driver record is where everyone looks."""
    from airflow_provider_streamstate.jobs import supervised

    _record(tmp_path, 1, "L-1")  # launched from another host
    app = tmp_path / "app.py"
    app.write_text("raise ValueError('no such topic: orders\\nsecond line')\n")
    monkeypatch.setenv(launcher.ENV_CHECKPOINT, str(tmp_path))
    monkeypatch.setenv(launcher.ENV_LAUNCH_ID, "L-1")
    monkeypatch.setenv(launcher.ENV_LAUNCH_GENERATION, "1")
    with pytest.raises(ValueError, match="no such topic"):
        supervised.main([str(app)])
    driver = records.read_driver(tmp_path, "L-1")
    assert driver is not None and driver.exit_code == 1
    assert driver.error == "builtins.ValueError: no such topic: orders"
    st = launcher.status(tmp_path)
    assert st.state == "dead" and st.last_error == "builtins.ValueError: no such topic: orders"
