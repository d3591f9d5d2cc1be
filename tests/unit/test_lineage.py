"""The operators' OpenLineage, asset names and extra links: a snapshot's lineage reads the
checkpoint and the topics its batches consumed and writes the stream's snapshots, versioned
by the snapshot id; a replication writes the same dataset in the destination; datasets are
named as the OpenLineage spec names S3, local and Kafka datasets; asset URIs and link URLs
are one spelling whatever spelling of a store they are given. Operators run for real on a
fake checkpoint and local stores (no Airflow DB: `execute` outside a DAG run emits no
events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_streamstate.assets.streams import (
    checkpoint_asset,
    location_uri,
    snapshots_asset,
    snapshots_to_handle,
)
from airflow_provider_streamstate.links.streams_ui import snapshot_of, snapshot_page_url
from airflow_provider_streamstate.operators.replicate import ReplicateSnapshotsOperator
from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.openlineage import dataset_name, kafka_namespace, snapshot_lineage
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.test_timelines import grow


@pytest.fixture
def stream(tmp_path: Path) -> StreamSpec:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    grow(ckpt, 3)
    return StreamSpec(name="orders", checkpoint=str(ckpt), store=str(tmp_path / "store"))


def names(datasets: list) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


def test_a_snapshots_lineage_reads_the_checkpoint_and_writes_a_version_of_the_streams_snapshots(stream) -> None:
    op = SnapshotStreamOperator(task_id="snapshot", stream=stream.to_dict())
    out = op.execute({})
    lineage = op.get_openlineage_facets_on_complete(None)
    # The spec names no Kafka cluster: the checkpoint is the only input.
    assert names(lineage.inputs) == [("file", stream.checkpoint)]
    assert names(lineage.outputs) == [("file", f"{stream.store}/streams/orders")]
    assert lineage.outputs[0].facets["version"].datasetVersion == out["snapshot_id"]

    # With the cluster known, each topic the batches read is an input, named by its first broker.
    with_topics = snapshot_lineage(checkpoint=stream.checkpoint, store=stream.store, result=out,
                                   kafka_bootstrap="PLAINTEXT://broker-1:9092,broker-2:9092")
    assert names(with_topics.inputs) == [("file", stream.checkpoint), ("kafka://broker-1:9092", "tx")]


def test_an_operator_that_did_not_run_reports_no_lineage(stream) -> None:
    lineage = SnapshotStreamOperator(task_id="snapshot", stream=stream.to_dict()).get_openlineage_facets_on_complete(None)
    assert (lineage.inputs, lineage.outputs) == ([], [])


def test_a_replications_lineage_copies_the_newest_version_into_the_destination(stream, tmp_path) -> None:
    first = SnapshotStreamOperator(task_id="s", stream=stream.to_dict()).execute({})
    dr = tmp_path / "dr"
    op = ReplicateSnapshotsOperator(task_id="replicate", stream=stream.to_dict(), destination_store=f"file://{dr}")
    out = op.execute({})
    lineage = op.get_openlineage_facets_on_complete(None)
    assert names(lineage.inputs) == [("file", f"{stream.store}/streams/orders")]
    assert names(lineage.outputs) == [("file", f"{dr}/streams/orders")]
    assert lineage.outputs[0].facets["version"].datasetVersion == first["snapshot_id"]
    # The link of a replication: its newest copy, in the destination store.
    assert snapshot_of(out) == ("orders", first["snapshot_id"], out["destination"])


@pytest.mark.parametrize(("location", "namespace", "name"), [
    ("s3://bucket/prefix/streams/orders", "s3://bucket", "prefix/streams/orders"),
    ("s3a://bucket/checkpoints/orders/", "s3://bucket", "checkpoints/orders"),
    ("/data/store/streams/orders", "file", "/data/store/streams/orders"),
    ("file:///data/store/../store/streams/orders", "file", "/data/store/streams/orders"),
    ("file:/data/ckpt", "file", "/data/ckpt"),
])
def test_datasets_are_named_as_the_openlineage_spec_names_s3_and_local_files(location, namespace, name) -> None:
    assert dataset_name(location) == (namespace, name)


def test_a_kafka_cluster_is_named_by_its_first_bootstrap_server() -> None:
    assert kafka_namespace("b1:9092, b2:9092") == "kafka://b1:9092"
    assert kafka_namespace("SASL_SSL://b1:9093") == "kafka://b1:9093"
    assert kafka_namespace("") is None


def test_every_spelling_of_a_store_names_one_asset() -> None:
    spellings = ["/data/store", "/data/store/", "file:/data/store", "file:///data/store", "file:///data/./store"]
    assert {snapshots_asset("orders", s).uri for s in spellings} == {"file:///data/store/streams/orders"}
    assert len({snapshots_asset("orders", s).name for s in spellings}) == 1
    s3 = snapshots_asset("orders", "s3://bucket/prefix/")
    assert (s3.name, s3.uri) == ("streamstate:orders:snapshots@s3://bucket/prefix", "s3://bucket/prefix/streams/orders")
    assert checkpoint_asset("orders", "s3a://bucket/ckpt").uri == "s3://bucket/ckpt"
    assert location_uri("s3://bucket") == "s3://bucket"


def test_snapshot_events_name_snapshots_of_configured_streams_in_their_own_store_once() -> None:
    orders = {"name": "orders", "checkpoint": "/c", "store": "/data/store"}
    extras = [
        {"stream": "orders", "store": "file:///data/store", "snapshot_id": "a"},
        {"stream": "orders", "store": "/data/store", "snapshot_id": "a"},  # the same snapshot again
        {"stream": "orders", "store": "s3://dr/x", "snapshot_id": "b"},  # a snapshot in another store
        {"stream": "payments", "store": "/data/store", "snapshot_id": "c"},  # not configured
        {"stream": "orders"},
    ]
    handled, passed_over = snapshots_to_handle(extras, [orders])
    assert handled == [{"stream": orders, "snapshot_id": "a"}]
    assert len(passed_over) == 3 and "not configured" in passed_over[1]


def test_the_snapshot_link_is_the_streams_ui_page_of_the_snapshot_in_its_store() -> None:
    url = snapshot_page_url("orders", "000000000007-20261126T060000000000Z", "s3://dr/prefix",
                            base_url="https://airflow.example.com/")
    assert url == ("https://airflow.example.com/streamstate/streams/orders/snapshots/"
                   "000000000007-20261126T060000000000Z?store=s3%3A%2F%2Fdr%2Fprefix")
    assert snapshot_page_url("orders", "x", None, base_url="") == "/streamstate/streams/orders/snapshots/x"
    assert snapshot_of(None) is None
    assert snapshot_of({"stream": "orders", "snapshots": [], "destination": "s3://dr"}) is None


def test_a_failovers_lineage_reads_the_dr_snapshot_and_topics_and_writes_the_dr_checkpoint() -> None:
    """Naming only (a failover needs a mirrored Kafka cluster: tests/integration/test_dr_drill.py runs one)."""
    from airflow_provider_streamstate.utils.openlineage import failover_lineage

    result = {"stream": "orders", "snapshot_id": "000000000007-20261126T060000000000Z"}
    lineage = failover_lineage(store="s3://dr-bucket/snapshots", checkpoint="s3a://dr-bucket/checkpoints/orders",
                               result=result, kafka_bootstrap="dr-broker:9092", topics=["primary.tx"])
    assert names(lineage.inputs) == [("s3://dr-bucket", "snapshots/streams/orders"), ("kafka://dr-broker:9092", "primary.tx")]
    assert lineage.inputs[0].facets["version"].datasetVersion == result["snapshot_id"]
    assert names(lineage.outputs) == [("s3://dr-bucket", "checkpoints/orders")]
