"""`streamstate_scheduled_snapshot`, run by Airflow on a real checkpoint: each stream's new
snapshot is validated with a GX suite, replicated to the DR store (the deferred sensor
waits until it is complete there) and retention runs in both stores, keeping the newest,
known-good snapshot and deleting the older one. A suite that fails alerts (the run fails,
naming it) and deletes nothing."""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from airflow_provider_streamstate.spec import StreamSpec
from tests.streams import run_to_end

pytestmark = pytest.mark.integration


def suite(max_amount: int) -> dict:
    return {
        "name": "accounts-sane",
        "meta": {"streamstate": {"operator": "stateStoreSave"}},
        "expectations": [
            {"type": "expect_column_values_to_be_between",
             "kwargs": {"column": "value_max", "min_value": 1, "max_value": max_amount}},
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}},
        ],
    }


def ids(store, stream: str) -> list[str]:  # noqa: ANN001
    return [m.snapshot_id for m in list_snapshots(store, stream).manifests]


def test_snapshot_validate_replicate_and_retention_run_per_stream_and_a_failed_suite_deletes_nothing(
    stack, spark, topic, tmp_path, run_dag, monkeypatch
) -> None:
    for region, conn in (("primary", "s3_primary"), ("dr", "s3_dr")):
        for key, value in stack.airflow_conn_env(region, conn).items():
            monkeypatch.setenv(key, value)
    prefix = f"scheduled-{uuid.uuid4().hex[:8]}"
    spec = StreamSpec(name="orders", checkpoint=str(tmp_path / "ckpt"), store=f"s3://streamstate/{prefix}",
                      storage_conn_id="s3_primary")
    dr_url = f"s3://streamstate/{prefix}-dr"
    primary = StreamstateStoreHook(spec.store, storage_conn_id="s3_primary").store
    dr = StreamstateStoreHook(dr_url, storage_conn_id="s3_dr").store

    gen = GeneratorSpec(seed=71, accounts=8, events=200)
    produce(stack.kafka_bootstrap, topic, gen)
    run_to_end(spark, stack.kafka_bootstrap, topic, spec.checkpoint)
    older = create_snapshot(spec.checkpoint, primary, "orders").manifest.snapshot_id
    produce(stack.kafka_bootstrap, topic, gen.next_round(100))
    run_to_end(spark, stack.kafka_bootstrap, topic, spec.checkpoint)

    good = tmp_path / "good.json"
    good.write_text(json.dumps(suite(100_000)))
    conf = {"streams": [spec.to_dict()], "suite": str(good), "dr_store": dr_url, "dr_storage_conn_id": "s3_dr",
            "retention": {"keep_last": 1}}
    result = run_dag("streamstate_scheduled_snapshot", conf)
    assert result.state == "success", result.log[-5000:]
    snap = result.tasks["stream.snapshot[0]"].xcom
    assert snap["reused"] is False and snap["snapshot_id"] != older
    assert result.tasks["stream.validate[0]"].xcom["success"] is True
    assert result.tasks["stream.replicate[0]"].xcom["bytes_copied"] > 0
    assert result.tasks["stream.replica_complete[0]"].state == "success"
    kept = result.tasks["stream.retention[0]"].xcom
    newest = next(m for m in list_snapshots(primary, "orders").manifests if m.snapshot_id == snap["snapshot_id"])
    if older in newest.chain_ids:
        # keep_last 1 keeps the older snapshot too when the new manifest is a delta that
        # builds on it (docs/retention.md): deleting it would break the kept one.
        assert kept["snapshots_deleted"] == 0 and kept["snapshots_kept"] == 2, kept
        reasons = {v["snapshot_id"]: " ".join(v["reasons"]) for v in kept["kept"]}
        assert "a kept delta builds on it" in reasons[older], reasons
        remaining = sorted([older, snap["snapshot_id"]])
    else:  # the batches rewrote most files: a full manifest, and the older snapshot goes
        assert kept["snapshots_deleted"] == 1 and kept["snapshots_kept"] == 1, kept
        remaining = [snap["snapshot_id"]]
    assert ids(primary, "orders") == remaining == ids(dr, "orders")
    assert f"orders: new {snap['snapshot_id']}" in result.log and "suite accounts-sane: passed" in result.log

    # The same batch again with a suite that cannot pass: the run fails naming it, and
    # nothing is deleted (retention runs, and keeps what it kept).
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({**suite(1), "name": "accounts-strict"}))
    failed = run_dag("streamstate_scheduled_snapshot", {**conf, "suite": str(strict)})
    assert failed.state == "failed", (failed.tasks["stream.snapshot[0]"].xcom, failed.tasks["stream.validate[0]"].xcom)
    assert failed.tasks["stream.validate[0]"].state == "failed"
    assert "suite accounts-strict failed" in failed.log
    assert f"1 problem(s): orders: {snap['snapshot_id']} failed suite accounts-strict" in failed.log
    assert failed.tasks["stream.snapshot[0]"].xcom["reused"] is True
    assert ids(primary, "orders") == remaining == ids(dr, "orders")
