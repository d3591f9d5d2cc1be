"""Anchors identify a record by its content, and a manifest carries them as validated,
optional data: manifests without them (v1, v2 before anchors) read as before."""

from __future__ import annotations

import json

import pytest

from airflow_provider_streamstate.engine.core.anchor import anchors_from_json
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError
from airflow_provider_streamstate.engine.core.manifest import FORMAT_V1, FORMAT_V2, Manifest
from airflow_provider_streamstate.engine.kafka.anchors import record_digest

SHA = "b" * 64
ANCHORS = {"tx": {"partition_count": 2, "partitions": {
    "0": {"offset": 9, "timestamp_ms": 1700000000000, "sha256": SHA, "repeat": 0}, "1": None}}}


def doc(fmt: str = FORMAT_V2, **over: object) -> bytes:
    d = {
        "format": fmt, "snapshot_id": "000000000007-20261121T101500123456Z", "stream": "s", "batch_id": 7,
        "created_at": "2026-11-21T10:15:00Z", "files": [{"path": "metadata", "size": 3, "sha256": "a" * 64}],
        "kafka_offsets": {"tx": {"0": 10, "1": 0}},
    }
    if fmt == FORMAT_V2:
        d["timeline"] = 1
    d.update(over)
    return json.dumps(d).encode()


def test_a_digest_tells_a_missing_key_from_an_empty_one_and_sees_header_order() -> None:
    assert record_digest(None, b"v", None) != record_digest(b"", b"v", None)
    assert record_digest(b"k", b"v", [("a", b"1"), ("b", b"2")]) != record_digest(b"k", b"v", [("b", b"2"), ("a", b"1")])
    assert record_digest(b"k", b"v", []) == record_digest(b"k", b"v", None)
    assert record_digest(b"ab", b"c", None) != record_digest(b"a", b"bc", None)


@pytest.mark.parametrize("fmt", [FORMAT_V2, FORMAT_V1])
def test_manifests_without_anchors_stay_readable_and_serialise_without_the_field(fmt: str) -> None:
    m = Manifest.from_json(doc(fmt))
    assert m.kafka_anchors is None
    assert "kafka_anchors" not in json.loads(m.to_json().split(b"\n", 1)[0])  # the v3 header


def test_anchors_survive_a_round_trip_through_the_manifest() -> None:
    m = Manifest.from_json(doc(kafka_anchors=ANCHORS))
    assert m.kafka_anchors == ANCHORS
    again = Manifest.from_json(m.to_json())
    assert again.kafka_anchors == ANCHORS
    parsed = anchors_from_json(again.kafka_anchors)
    assert parsed["tx"].partitions["1"] is None
    assert parsed["tx"].partitions["0"].offset == 9


@pytest.mark.parametrize("bad", [
    [],
    {"tx": {"partition_count": 0, "partitions": {}}},
    {"tx": {"partition_count": 2, "partitions": {"x": None}}},
    {"tx": {"partition_count": 2, "partitions": {"0": {"offset": 1, "timestamp_ms": 1, "sha256": "zz", "repeat": 0}}}},
    {"tx": {"partition_count": 2, "partitions": {"0": {"offset": -1, "timestamp_ms": 1, "sha256": SHA, "repeat": 0}}}},
    {"tx": {"partition_count": 2, "partitions": {"0": {"offset": 1, "timestamp_ms": 1, "sha256": SHA}}}},
])
def test_malformed_anchors_make_the_manifest_unreadable(bad: object) -> None:
    with pytest.raises(UnsafeManifestError, match="kafka_anchors"):
        Manifest.from_json(doc(kafka_anchors=bad))
