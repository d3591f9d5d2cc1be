"""A stop that lands after a busy stream planned its next batch interrupts that batch: the
checkpoint holds `offsets/N` without `commits/N`, which a restart redoes as planned. Work on
the stopped checkpoint at batch N-1 (a rescale, an edit) would drop that plan, so
`finish_planned_batch` runs the stream once more, for exactly that batch, and the checkpoint
ends at a batch boundary. Real spark-submit drivers, real broker."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.records import stop_requested
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from airflow_provider_streamstate.streams.start import finish_planned_batch, start_stream
from tests.streams import consumed_records, example_stream_spec, wait_for

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)


def _batches(checkpoint: str) -> tuple[list[int], list[int]]:
    reader = CheckpointReader(open_checkpoint_fs(checkpoint))
    return reader.offset_batches(), reader.committed_batches()


def test_a_batch_a_stop_left_planned_is_committed_by_one_more_run_that_reads_nothing_else(
    stack, topic, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    spec = example_stream_spec(stack, topic, tmp_path, spark_default_manager=True)
    first = GeneratorSpec(seed=17, accounts=20, events=300)
    produce(stack.kafka_bootstrap, topic, first)
    start_stream(spec, startup_timeout_s=600, log=log)
    try:
        wait_for(lambda: consumed_records(spec.checkpoint) == 300, timeout=300, what="the first 300 records")
    finally:
        launcher.stop(spec.checkpoint, timeout_s=120)
    assert finish_planned_batch(spec, timeout_s=300, log=log) is None  # at a boundary: nothing launched
    offsets, commits = _batches(spec.checkpoint)
    last = commits[-1]
    assert offsets[-1] == last and last >= 2  # 100 records a batch at most

    # What a stop after the next plan leaves: the newest batch planned, its commit absent.
    ckpt = Path(spec.checkpoint)
    for name in (str(last), f".{last}.crc"):
        (ckpt / "commits" / name).unlink(missing_ok=True)
    planned = (ckpt / "offsets" / str(last)).read_bytes()
    produce(stack.kafka_bootstrap, topic, first.next_round(200))  # a run planning anew would read these

    before_finish = datetime.now(UTC) - timedelta(seconds=1)
    assert finish_planned_batch(spec, timeout_s=300, log=log) == last
    assert stop_requested(spec.checkpoint, since=before_finish) is not None  # still stopped on purpose
    offsets, commits = _batches(spec.checkpoint)
    assert (offsets[-1], commits[-1]) == (last, last)  # exactly the planned batch, nothing after it
    assert (ckpt / "offsets" / str(last)).read_bytes() == planned
    assert consumed_records(spec.checkpoint) == 300
    assert launcher.status(spec.checkpoint).state not in ("starting", "running")

    # The stream goes on from there, and reads the rest.
    start_stream(spec, startup_timeout_s=600, log=log)
    try:
        wait_for(lambda: consumed_records(spec.checkpoint) == 500, timeout=300, what="the next 200 records")
    finally:
        launcher.stop(spec.checkpoint, timeout_s=120)
