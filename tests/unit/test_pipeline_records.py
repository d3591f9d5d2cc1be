"""Pipeline snapshots as records in a store: a spec is refused unless a cut can serve it; a
record read back is untrusted (tampering is refused, channel records are checked against
their count and sha256); retention deletes them as units and releases only its own pins,
finishing a deletion a crash interrupted; replication publishes the record last and never
over damaged channels. Built from fake checkpoints: no Kafka, no Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.retention import pin_key, pin_snapshot, pinned_ids
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.pipeline.channel import ChannelRecord
from airflow_provider_streamstate.engine.pipeline.cut import ChannelRange
from airflow_provider_streamstate.engine.pipeline.replicate import replicate_pipeline
from airflow_provider_streamstate.engine.pipeline.retention import apply_pipeline_retention
from airflow_provider_streamstate.engine.pipeline.snapshots import (
    MemberSnapshot,
    PipelineSnapshot,
    get_pipeline_snapshot,
    list_pipeline_snapshots,
    record_pipeline_snapshot,
)
from airflow_provider_streamstate.engine.pipeline.spec import Link, PipelineSpec
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

SPEC = PipelineSpec("orders", {"enrich": "/ck/enrich", "totals": "/ck/totals"}, (Link("enrich", "link", "totals"),))


def _checkpoint(root: Path) -> Path:
    ckpt = make_checkpoint(root, batches=2)
    for d in store_dirs(ckpt):
        write(d / "1.delta", "a")
        write(d / "2.delta", "b")
    return ckpt


def _pipeline_snapshot(store: LocalStore, tmp_path: Path, sid: str) -> PipelineSnapshot:
    """Member snapshots of two fake checkpoints, published as one pipeline snapshot."""
    members = {}
    for stream in SPEC.members:
        m = create_snapshot(str(_checkpoint(tmp_path / f"{sid}-{stream}")), store, stream, always=True).manifest
        members[stream] = MemberSnapshot(stream, m.snapshot_id, m.batch_id, {"tx": {"0": 20, "1": 40}},
                                         {"link": {"0": 7}} if stream == "enrich" else {})
    rng = ChannelRange("link", "enrich", "totals", {"0": 5}, {"0": 7})
    records = [ChannelRecord(0, 5, 1700, b"k", b"v1", [("h", b"x")]), ChannelRecord(0, 6, 1701, None, b"v2", [])]
    return record_pipeline_snapshot(store, SPEC, sid, "2026-11-26T00:00:00+00:00", members, [(rng, records)], 0.1)


@pytest.mark.parametrize(("links", "said"), [
    ((), "declares no link"),
    ((Link("a", "t", "c"),), "names c, which is not a member"),
    ((Link("a", "t", "a"),), "links a to itself"),
    ((Link("a", "t", "b"), Link("b", "u", "a")), "form a cycle"),
    ((Link("a", "t", "b"), Link("b", "t", "a")), "has two upstreams"),
    ((Link("a", "t", "b"), Link("a", "t", "c")), "has two downstreams"),
    ((Link("a", "../streams/x", "b"),), "is not a Kafka topic name"),
])
def test_a_pipeline_spec_refuses_what_no_cut_can_serve(links: tuple[Link, ...], said: str) -> None:
    members = {"a": "/ck/a", "b": "/ck/b", **({"c": "/ck/c"} if said == "has two downstreams" else {})}
    with pytest.raises(UsageError, match=said):
        PipelineSpec("p", members, links)


def test_a_pipeline_spec_orders_members_upstream_first_and_reads_back_as_written() -> None:
    with pytest.raises(UsageError, match="c of pipeline p is linked to no other member"):
        PipelineSpec("p", {"a": "/a", "b": "/b", "c": "/c"}, (Link("a", "t", "b"),))
    spec = PipelineSpec("p", {"a": "/a", "b": "/b", "c": "/c"}, (Link("b", "u", "c"), Link("a", "t", "b")))
    assert spec.order() == ["a", "b", "c"]
    assert PipelineSpec.from_json(spec.to_json()) == spec


def test_a_pipeline_snapshot_reads_back_whole_and_its_channel_checked(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    snap = _pipeline_snapshot(store, tmp_path, "20260101T000000000001Z")
    again = get_pipeline_snapshot(store, "orders", "latest")
    assert again.to_json() == snap.to_json()
    records = again.channel_records(store, again.channels[0])
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [(5, b"k", b"v1", [("h", b"x")]),
                                                                        (6, None, b"v2", [])]
    assert all(m.snapshot_id in pinned_ids(store, m.stream) for m in again.members.values())


@pytest.mark.parametrize(("tamper", "said"), [
    ("format", "is not a pipeline snapshot"), ("member", "is not in the pipeline's spec"),
    ("channel-key", "is not this snapshot's"), ("channel-bytes", "do not match their sha256"),
    ("channel-count", "holds 2 records, the snapshot says 3"), ("channel-topic", "not one per link"),
    ("channel-range", "does not match its link or its ranges"), ("link-topic", "is not a Kafka topic name"),
])
def test_a_tampered_pipeline_snapshot_is_refused(tmp_path: Path, tamper: str, said: str) -> None:
    store = LocalStore(tmp_path / "store")
    sid = "20260101T000000000001Z"
    snap = _pipeline_snapshot(store, tmp_path, sid)
    key = f"pipelines/orders/snapshots/{sid}.json"
    d = snap.to_json()
    channel_key = snap.channels[0].key
    if tamper == "format":
        d["format"] = "something/else"
    elif tamper == "member":
        d["members"]["intruder"] = d["members"].pop("totals")
    elif tamper == "channel-key":
        d["channels"][0]["key"] = "pipelines/orders/channels/20260101T000000000000Z/link.json"
    elif tamper == "channel-count":
        d["channels"][0]["records"] = 3
    elif tamper == "channel-topic":  # a path for the store's keys
        d["channels"][0]["topic"] = "../../streams/enrich/pins/x"
    elif tamper == "channel-range":
        d["channels"][0]["start"] = {"0": 9}
    elif tamper == "link-topic":
        d["spec"]["links"][0]["topic"] = "../../x"
    if tamper == "channel-bytes":
        store.replace_record(channel_key, store.get_record(channel_key).replace(b'"o":5', b'"o":4'))  # type: ignore[union-attr]
    else:
        store.replace_record(key, json.dumps(d).encode())
    with pytest.raises(UnsafeManifestError, match=said):
        read = get_pipeline_snapshot(store, "orders", sid)
        read.channel_records(store, read.channels[0])


def test_retention_deletes_pipeline_snapshots_as_units_and_releases_only_their_pins(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    old, mid, new = (_pipeline_snapshot(store, tmp_path, f"20260101T00000000000{i}Z") for i in (1, 2, 3))
    own = create_snapshot(str(_checkpoint(tmp_path / "own")), store, "enrich", always=True).manifest
    pin_snapshot(store, "enrich", own.snapshot_id, reason="kept by hand")

    plan = apply_pipeline_retention(store, "orders", keep_last=2, dry_run=True)
    assert plan.deleted == [old.snapshot_id] and list_pipeline_snapshots(store, "orders") == [
        old.snapshot_id, mid.snapshot_id, new.snapshot_id]
    result = apply_pipeline_retention(store, "orders", keep_last=2)
    assert result.deleted == [old.snapshot_id] and result.pins_released == 2
    assert list_pipeline_snapshots(store, "orders") == [mid.snapshot_id, new.snapshot_id]
    assert store.get_record(old.channels[0].key) is None
    assert not {m.snapshot_id for m in old.members.values()} & (pinned_ids(store, "enrich") | pinned_ids(store, "totals"))
    assert own.snapshot_id in pinned_ids(store, "enrich")  # a person's pin stays

    # A deletion interrupted after the record went: the next run finishes it.
    store.delete_record(f"pipelines/orders/snapshots/{mid.snapshot_id}.json")
    result = apply_pipeline_retention(store, "orders", keep_last=1)
    assert result.deleted == [] and result.pins_released == 2
    assert store.get_record(mid.channels[0].key) is None
    assert store.get_record(pin_key("enrich", mid.members["enrich"].snapshot_id)) is None
    assert get_pipeline_snapshot(store, "orders", new.snapshot_id).to_json() == new.to_json()


def test_replication_publishes_a_pipeline_snapshot_whole_and_refuses_damaged_channels(tmp_path: Path) -> None:
    source, destination = LocalStore(tmp_path / "source"), LocalStore(tmp_path / "dr")
    first = _pipeline_snapshot(source, tmp_path, "20260101T000000000001Z")
    result = replicate_pipeline(source, destination, "orders")
    assert result.published == [first.snapshot_id] and result.member_snapshots_published == 2
    assert get_pipeline_snapshot(destination, "orders", first.snapshot_id).to_json() == first.to_json()
    assert all(m.snapshot_id in pinned_ids(destination, m.stream) for m in first.members.values())
    assert replicate_pipeline(source, destination, "orders").already_present == [first.snapshot_id]

    second = _pipeline_snapshot(source, tmp_path, "20260101T000000000002Z")
    key = second.channels[0].key
    source.replace_record(key, source.get_record(key).replace(b'"p":0', b'"p":1', 1))  # type: ignore[union-attr]
    with pytest.raises(UnsafeManifestError, match="do not match their sha256"):
        replicate_pipeline(source, destination, "orders")
    assert list_pipeline_snapshots(destination, "orders") == [first.snapshot_id]


def test_an_in_place_restore_over_a_running_member_is_refused_before_kafka_is_touched(tmp_path: Path) -> None:
    """The heartbeat beside a member's checkpoint says running: refused at once, naming it,
    with nothing appended (the broker given here does not exist: touching it would time out)."""
    from dataclasses import replace

    from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
    from airflow_provider_streamstate.engine.core.errors import StreamRunningError
    from airflow_provider_streamstate.engine.pipeline.restore import restore_pipeline

    store = LocalStore(tmp_path / "store")
    snap = _pipeline_snapshot(store, tmp_path, "20260101T000000000001Z")
    running = tmp_path / "running-totals"
    members = {"enrich": str(tmp_path / "stopped-enrich"), "totals": str(running)}
    snap = replace(snap, spec=replace(snap.spec, members=members))
    write_heartbeat(running, Heartbeat(query_id="q", run_id="r", query_name="totals", host="elsewhere", pid=1,
                                       state="running", batch_id=3, input_rows=1, updated_at=now_iso(),
                                       interval_s=60.0))
    with pytest.raises(StreamRunningError, match="cannot restore the pipeline over it: query totals is running"):
        restore_pipeline(store, snap, "127.0.0.1:9")
    assert not (tmp_path / "stopped-enrich").exists()
