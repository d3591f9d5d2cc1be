"""Snapshot assets in real DAG runs (`dag.test()` on SQLite): a snapshot task of
streamstate_scheduled_snapshot emits an event on its stream's snapshots asset with the
snapshot id, batch and bytes as the extra, the asset is listed on the Assets page, and the
task's extra link is the snapshot's page in the Streams UI; Airflow queues
streamstate_on_snapshot for that event; the asset-triggered run the scheduler's own code
creates from the queue validates and replicates exactly the snapshot the event names, each
emitting its own event, and does not queue itself again.

The validation is answered by a stored result of the suite on that snapshot (the fake
checkpoint holds no state Spark could read), so no Spark job runs; the validate operator's
OpenLineage (the suite's results as a data quality facet) is checked on the same path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.assets.streams import snapshots_asset, validations_asset
from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.links.streams_ui import snapshot_page_url
from airflow_provider_streamstate.spec import StreamSpec
from tests.airflow_harness import ui_link
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.test_timelines import grow

ON_SNAPSHOT = "streamstate_on_snapshot"
SUITE = {"name": "accounts", "expectations": [
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}},
    {"type": "expect_column_max_to_be_between", "kwargs": {"column": "value_max", "max_value": 100000}},
]}


@pytest.fixture
def stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StreamSpec:
    """A configured stream (the Variable streamstate_streams) on a fake checkpoint and a local store."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    grow(ckpt, 3)
    spec = StreamSpec(name="orders", checkpoint=str(ckpt), store=str(tmp_path / "store"))
    monkeypatch.setenv("AIRFLOW_VAR_STREAMSTATE_STREAMS", json.dumps([spec.to_dict()]))
    return spec


@pytest.fixture
def on_snapshot_unpaused() -> Iterator[None]:
    """streamstate_on_snapshot unpaused, as a user does in the UI (a new DAG starts paused, and a
    paused DAG is not queued); paused again after the test."""
    set_paused(ON_SNAPSHOT, False)
    yield
    set_paused(ON_SNAPSHOT, True)


def set_paused(dag_id: str, paused: bool) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        known = session.get(DagModel, dag_id) is not None
    if not known:  # not serialized yet in this session's DB: parse the DAG folder as the processor does
        manager = DagBundlesManager()
        manager.sync_bundles_to_db()
        for bundle in manager.get_all_dag_bundles():
            if not bundle.is_initialized:
                bundle.initialize()
            bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
            sync_bag_to_db(bag, bundle.name, bundle.version)
    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == dag_id).values(is_paused=paused))


def events_of(asset: Any) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                               .where(AssetModel.name == asset.name, AssetModel.uri == asset.uri)
                               .order_by(AssetEvent.id))
        return [{"extra": e.extra, "dag_id": e.source_dag_id, "task_id": e.source_task_id} for e in rows]


def listed_on_assets_page(asset: Any) -> bool:
    """After the scheduler's periodic pass over assets (its own code), whether the asset is
    active, which the Assets page's list (`only_active`) asks."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.asset import AssetActive
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        SchedulerJobRunner(job=Job())._update_asset_orphanage(session=session)
    with create_session() as session:
        return session.scalar(select(AssetActive).where(AssetActive.name == asset.name,
                                                        AssetActive.uri == asset.uri)) is not None


def queued_runs_of(dag_id: str) -> int:
    from airflow.models.asset import AssetDagRunQueue
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return int(session.scalar(select(func.count()).select_from(AssetDagRunQueue)
                                  .where(AssetDagRunQueue.target_dag_id == dag_id)) or 0)


def asset_triggered_run(dag_id: str, conf: dict[str, Any]) -> str:
    """The run the scheduler creates for `dag_id` from its queued asset events (its own
    code), with `conf` as a trigger would give it; its run id."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from sqlalchemy import select

    runner = SchedulerJobRunner(job=Job())
    with create_session() as session:
        runner._create_dag_runs_asset_triggered(dag_models=[session.get(DagModel, dag_id)], session=session)
    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_type == DagRunType.ASSET_TRIGGERED)
                             .order_by(DagRun.id.desc()))
        assert run is not None, "the scheduler created no asset-triggered run"
        run.conf = conf
        run.state = DagRunState.RUNNING
        return str(run.run_id)


def existing_run(run_id: str) -> Any:
    """A stand-in for dag.test()'s run factory that hands it the run `run_id`."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    def get(*, dag: Any, session: Any, **_: Any) -> DagRun:
        run = session.scalar(select(DagRun).where(DagRun.run_id == run_id))
        run.dag = dag
        return run

    return get


def store_suite_result(stream: StreamSpec, snapshot_id: str, passed: list[bool]) -> None:
    """SUITE's result on a snapshot, stored as a validation leaves it (`passed`: per expectation)."""
    from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
    from airflow_provider_streamstate.engine.catalog.validation_records import (
        ExpectationOutcome,
        ValidationRecord,
        put_validation,
    )
    from airflow_provider_streamstate.engine.state.reader import StateSelector, canonical_selector
    from airflow_provider_streamstate.engine.state.validation import load_suite, selector_for

    suite = load_suite(SUITE)
    store = LocalStore(stream.store)
    manifest = resolve_snapshot(store, stream.name, snapshot_id)
    selector = canonical_selector(manifest, selector_for(suite, StateSelector(None, None, None, None)))
    outcomes = [ExpectationOutcome(e["type"], e["kwargs"], ok, 1 if ok else 10**9)
                for e, ok in zip(SUITE["expectations"], passed, strict=True)]
    put_validation(store, ValidationRecord(stream.name, snapshot_id, manifest.batch_id, SUITE["name"], suite.sha256,
                                           all(passed), "2026-11-26T06:00:00Z", "1.24.1", 1.0, selector.to_json(),
                                           outcomes))


def test_a_snapshot_event_runs_validation_and_replication_of_that_snapshot(
    run_dag, stream, on_snapshot_unpaused, tmp_path, monkeypatch
) -> None:
    import airflow.models.dagrun

    result = run_dag("streamstate_scheduled_snapshot", {"streams": [stream.to_dict()], "retention": None})
    assert result.state == "success", result.log[-3000:]
    snap = result.tasks["stream.snapshot"].xcom
    sid = snap["snapshot_id"]

    # The snapshot's event: its id, batch and bytes, on the stream's asset in its store.
    events = events_of(snapshots_asset("orders", stream.store))
    assert events[-1]["extra"] == {
        "stream": "orders", "store": stream.store, "snapshot_id": sid, "batch_id": snap["batch_id"],
        "timeline": snap["timeline"], "bytes_total": snap["bytes_total"], "bytes_uploaded": snap["bytes_uploaded"],
        "reused": False,
    }
    assert (events[-1]["dag_id"], events[-1]["task_id"]) == ("streamstate_scheduled_snapshot", "stream.snapshot")
    assert ui_link("streamstate_scheduled_snapshot", "stream.snapshot") == snapshot_page_url("orders", sid, snap["store"])
    assert queued_runs_of(ON_SNAPSHOT) == 1  # the scheduler would start streamstate_on_snapshot
    # The scheduler's asset bookkeeping makes it active: the Assets page lists active assets.
    assert listed_on_assets_page(snapshots_asset("orders", stream.store))

    # The suite's stored result on that snapshot (as an earlier validation leaves it).
    store_suite_result(stream, sid, [True, True])
    suite_file = tmp_path / "accounts.json"
    suite_file.write_text(json.dumps(SUITE))

    dr = tmp_path / "dr"
    run_id = asset_triggered_run(ON_SNAPSHOT, {"suite": str(suite_file), "dr_store": f"file://{dr}"})
    # dag.test() runs that run, not a manual one of its own making (only the run's origin changes).
    monkeypatch.setattr(airflow.models.dagrun, "get_or_create_dagrun", existing_run(run_id))
    consumer = run_dag(ON_SNAPSHOT)
    assert consumer.state == "success", consumer.log[-3000:]
    assert consumer.tasks["snapshots_to_handle"].xcom == [{"stream": stream.to_dict(), "snapshot_id": sid}]
    checked = consumer.tasks["snapshot.validate[0]"].xcom
    assert (checked["snapshot_id"], checked["success"], checked["reused"]) == (sid, True, True)
    copied = consumer.tasks["snapshot.replicate[0]"].xcom
    assert [s["snapshot_id"] for s in copied["snapshots"]] == [sid]
    assert LocalStore(dr).list_snapshot_ids("orders") == [sid]

    # Their own events: the validation's and the replica's (in the DR store), and no new run of this DAG.
    validation = events_of(validations_asset("orders", stream.store))[-1]["extra"]
    assert validation == {"stream": "orders", "store": stream.store, "snapshot_id": sid, "batch_id": snap["batch_id"],
                          "suite": "accounts", "success": True, "evaluated": 2, "failed": 0}
    replica = events_of(snapshots_asset("orders", f"file://{dr}"))[-1]["extra"]
    assert (replica["snapshot_id"], replica["store"], replica["source"]) == (sid, f"file://{dr}", stream.store)
    assert queued_runs_of(ON_SNAPSHOT) == 0
    assert ui_link(ON_SNAPSHOT, "snapshot.replicate") == snapshot_page_url("orders", sid, copied["destination"])
    assert ui_link(ON_SNAPSHOT, "snapshot.validate") == snapshot_page_url("orders", sid, stream.store)


def test_a_validations_lineage_carries_the_suites_results_as_a_data_quality_facet(stream) -> None:
    """The validate operator run for real on a snapshot whose result for the suite is stored."""
    from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
    from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator

    sid = SnapshotStreamOperator(task_id="snapshot", stream=stream.to_dict()).execute({})["snapshot_id"]
    store_suite_result(stream, sid, [True, False])
    op = ValidateSnapshotOperator(task_id="validate", stream=stream.to_dict(), suite=SUITE, snapshot=sid,
                                  fail_on_failure=False)
    assert op.execute({})["success"] is False
    lineage = op.get_openlineage_facets_on_complete(None)
    [snapshots] = lineage.inputs
    assert (snapshots.namespace, snapshots.name) == ("file", f"{stream.store}/streams/orders")
    assert snapshots.facets["version"].datasetVersion == sid
    assertions = snapshots.inputFacets["dataQualityAssertions"].assertions
    assert [(a.assertion, a.column, a.success) for a in assertions] == [
        ("expect_column_values_to_not_be_null", "key_account", True),
        ("expect_column_max_to_be_between", "value_max", False),
    ]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", f"{stream.store}/streams/orders/validations")]
