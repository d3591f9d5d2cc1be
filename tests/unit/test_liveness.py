"""The heartbeat record says a stream is running only while it is fresh, well formed and
(on this host) its driver is alive; it is replaced atomically, and anything hostile or
torn in it never claims a running stream nor breaks the one-line refusal."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import (
    HEARTBEAT_FILE,
    Heartbeat,
    assert_not_running,
    is_running,
    read_heartbeat,
    write_heartbeat,
)
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import StreamRunningError
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def beat(**changes: Any) -> Heartbeat:
    """A fresh `running` beat from another host (its pid cannot be checked from here)."""
    base = Heartbeat(query_id="q-1", run_id="r-1", query_name="orders", host="worker-7", pid=4242,
                     state="running", batch_id=12, input_rows=500, updated_at=NOW.isoformat(), interval_s=5.0)
    return replace(base, **changes)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def raw(ckpt: Path, record: dict[str, Any] | bytes | str) -> None:
    data = record if isinstance(record, bytes | str) else json.dumps(record)
    write(ckpt / HEARTBEAT_FILE, data)


def good() -> dict[str, Any]:
    return json.loads(beat().to_json())


# --- the record -------------------------------------------------------------------------


def test_the_record_lives_beside_the_checkpoint_and_round_trips(tmp_path: Path) -> None:
    write_heartbeat(tmp_path, beat())
    assert (tmp_path / "_streamstate" / "heartbeat.json").is_file()
    assert read_heartbeat(tmp_path) == beat()
    assert read_heartbeat(tmp_path / "elsewhere") is None
    assert set(good()) == {"format", "query_id", "run_id", "query_name", "host", "pid", "state", "batch_id",
                           "input_rows", "updated_at", "interval_s", "exception", "launch_id", "spark_version"}


def test_the_snapshot_planner_leaves_the_record_out(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=3)
    for store in store_dirs(ckpt):
        for v in (1, 2, 3):
            write(store / f"{v}.delta", b"delta")
    write_heartbeat(ckpt, beat())
    plan = CheckpointReader(str(ckpt)).plan()
    assert plan.files and not [f.path for f in plan.files if f.path.startswith("_streamstate")]


def test_a_reader_never_sees_half_a_record(tmp_path: Path) -> None:
    """Records of very different sizes replaced as fast as possible while another thread reads."""
    beats = [beat(query_name="q" * n, batch_id=n) for n in (1, 200, 3, 150)]
    write_heartbeat(tmp_path, beats[0])
    done = threading.Event()
    seen: list[Heartbeat | None] = []

    def read() -> None:
        while not done.is_set():
            seen.append(read_heartbeat(tmp_path))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(2000):
            write_heartbeat(tmp_path, beats[i % len(beats)])
    finally:
        done.set()
        reader.join()
    assert len(seen) > 10
    assert all(b in beats for b in seen), "a reader saw a torn or missing record"
    assert os.listdir(tmp_path / "_streamstate") == ["heartbeat.json"]  # no temp files left


def test_a_failed_write_keeps_the_previous_record_and_leaves_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    write_heartbeat(tmp_path, beat(batch_id=1))

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_heartbeat(tmp_path, beat(batch_id=2))
    monkeypatch.undo()
    assert read_heartbeat(tmp_path) == beat(batch_id=1)
    assert os.listdir(tmp_path / "_streamstate") == ["heartbeat.json"]


HOSTILE: list[tuple[str, Any]] = [
    ("not json", b"{not json"),
    ("binary", bytes(range(256))),
    ("a list", [good()]),
    ("another format", {**good(), "format": "streamstate.heartbeat/v9"}),
    ("no format", {k: v for k, v in good().items() if k != "format"}),
    ("no pid", {k: v for k, v in good().items() if k != "pid"}),
    ("pid 0 (kill(0) means my group)", {**good(), "pid": 0}),
    ("negative pid", {**good(), "pid": -1}),
    ("pid as text", {**good(), "pid": "4242"}),
    ("pid as bool", {**good(), "pid": True}),
    ("unknown state", {**good(), "state": "zombie"}),
    ("batch as float", {**good(), "batch_id": 1.5}),
    ("zero interval", {**good(), "interval_s": 0}),
    ("huge interval", {**good(), "interval_s": 1e9}),
    ("interval as bool", {**good(), "interval_s": True}),
    ("naive time", {**good(), "updated_at": "2026-06-01T12:00:00"}),
    ("not a time", {**good(), "updated_at": "yesterday"}),
    ("multi-line name", {**good(), "query_name": "orders\nERROR: forged log line"}),
    ("control characters in host", {**good(), "host": "worker\x1b[2J"}),
    ("very long name", {**good(), "query_name": "q" * 10_000}),
    ("multi-line exception", {**good(), "state": "failed", "exception": "boom\n  at Foo"}),
    ("exception not text", {**good(), "state": "failed", "exception": {"message": "boom"}}),
    ("nested too deep", "[" * 100_000 + "]" * 100_000),
    ("too big", {**good(), "padding": "x" * 100_000}),
]


@pytest.mark.parametrize(("case", "content"), HOSTILE, ids=[c for c, _ in HOSTILE])
def test_hostile_or_torn_content_is_refused_and_never_claims_a_running_stream(
    tmp_path: Path, case: str, content: Any
) -> None:
    raw(tmp_path, content)
    assert read_heartbeat(tmp_path) is None, case
    assert not is_running(tmp_path, now=NOW)
    assert_not_running(tmp_path, "restore")  # nothing to refuse


def test_a_directory_in_place_of_the_record_is_no_record(tmp_path: Path) -> None:
    (tmp_path / HEARTBEAT_FILE).mkdir(parents=True)
    assert read_heartbeat(tmp_path) is None


def test_unknown_fields_are_ignored_for_newer_writers(tmp_path: Path) -> None:
    raw(tmp_path, {**good(), "progress_url": "http://driver:4040"})
    assert read_heartbeat(tmp_path) == beat()


# --- is it running? ---------------------------------------------------------------------


def test_a_beat_is_fresh_for_three_intervals_plus_slack(tmp_path: Path) -> None:
    write_heartbeat(tmp_path, beat(interval_s=5.0))  # stale after 3 * 5 + 10 = 25 s
    assert is_running(tmp_path, now=at(0))
    assert is_running(tmp_path, now=at(24.9))
    assert not is_running(tmp_path, now=at(25.1))
    write_heartbeat(tmp_path, beat(interval_s=60.0))  # a slow beater is given longer
    assert is_running(tmp_path, now=at(180))


def test_a_writer_clock_slightly_ahead_is_fresh_far_ahead_is_not_trusted(tmp_path: Path) -> None:
    write_heartbeat(tmp_path, beat())
    assert is_running(tmp_path, now=at(-5))  # the writer's clock is 5 s ahead of ours
    assert not is_running(tmp_path, now=at(-3600))  # an hour ahead: skewed or forged


@pytest.mark.parametrize("state", ["stopped", "failed"])
def test_a_stopped_or_failed_stream_is_not_running_however_fresh(tmp_path: Path, state: str) -> None:
    write_heartbeat(tmp_path, beat(state=state, exception="boom" if state == "failed" else None))
    assert not is_running(tmp_path, now=NOW)


def test_a_starting_stream_is_running(tmp_path: Path) -> None:
    write_heartbeat(tmp_path, beat(state="starting", batch_id=None, input_rows=None))
    assert is_running(tmp_path, now=NOW)


def test_on_this_host_a_dead_driver_is_not_running_even_with_a_fresh_beat(tmp_path: Path) -> None:
    host = socket.gethostname()
    write_heartbeat(tmp_path, beat(host=host, pid=dead_pid()))
    assert not is_running(tmp_path, now=NOW)
    write_heartbeat(tmp_path, beat(host=host, pid=os.getpid()))
    assert is_running(tmp_path, now=NOW)
    write_heartbeat(tmp_path, beat(host="worker-7", pid=dead_pid()))  # another host's pids say nothing
    assert is_running(tmp_path, now=NOW)


# --- the refusal ------------------------------------------------------------------------


def test_the_refusal_is_one_line_naming_query_host_pid_age_and_what_to_do(tmp_path: Path) -> None:
    write_heartbeat(tmp_path, replace(beat(), updated_at=(datetime.now(UTC) - timedelta(seconds=7)).isoformat()))
    with pytest.raises(StreamRunningError) as err:
        assert_not_running(tmp_path, "replace its checkpoint")
    text = err.value.one_line()
    assert "\n" not in text
    assert text.startswith("cannot replace its checkpoint: query orders is running on ")
    for words in ("host worker-7", "pid 4242", "last beat 7s ago", "batch 12", "stop the stream first",
                  str(tmp_path / HEARTBEAT_FILE)):
        assert words in text
    # 25 s window - 7 s of age: the record goes stale in about 18 s.
    assert any(f"goes stale in {n}s" in text for n in (18, 19)), text
    assert not err.value.retryable


def test_nothing_is_refused_without_a_running_stream(tmp_path: Path) -> None:
    assert_not_running(tmp_path, "restore")  # no record at all
    write_heartbeat(tmp_path, beat(state="stopped", updated_at=datetime.now(UTC).isoformat()))
    assert_not_running(tmp_path, "restore")
    write_heartbeat(tmp_path, beat(updated_at=(datetime.now(UTC) - timedelta(minutes=5)).isoformat()))
    assert_not_running(tmp_path, "restore")  # a stale beat: the driver died without saying so
