"""Manifests are untrusted input: everything is validated before anyone acts on it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import (
    FORMAT,
    FORMAT_V1,
    FORMAT_V2,
    Manifest,
    SnapshotRef,
    new_snapshot_id,
    parse_labels,
    safe_relative_path,
    validate_stream_name,
)

SHA = "a" * 64


def doc(**over):
    """A v2 manifest (one document): what older engines wrote, and every field's checks."""
    d = {
        "format": FORMAT_V2, "snapshot_id": "000000000007-20261121T101500123456Z", "stream": "s", "batch_id": 7,
        "created_at": "2026-11-21T10:15:00Z", "files": [{"path": "metadata", "size": 3, "sha256": SHA}],
        "timeline": 1,
    }
    d.update(over)
    return json.dumps(d).encode()


@pytest.mark.parametrize("path", ["metadata", "state/0/1/3.delta", "state/0/1/left-keyToNumValues/.3.delta.crc"])
def test_plain_relative_paths_are_accepted(path) -> None:
    assert safe_relative_path(path) == path


@pytest.mark.parametrize(
    "path", ["", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a/", "./a", "a\\b", "C:/x", "a\x00b", "a\nb", None, 3]
)
def test_escaping_or_odd_paths_are_refused(path) -> None:
    with pytest.raises(UnsafeManifestError):
        safe_relative_path(path)


def header(data: bytes) -> dict:
    """A v3 manifest's first line: its header."""
    return json.loads(data.split(b"\n", 1)[0])


def test_a_valid_manifest_round_trips() -> None:
    m = Manifest.from_json(doc())
    assert m.batch_id == 7 and m.files[0].path == "metadata"
    again = Manifest.from_json(m.to_json())
    assert again == replace(m, format=FORMAT)  # the v2 document, written again as v3
    assert header(m.to_json())["totals"] == {"files": 1, "bytes": 3, "blobs": 1}
    assert header(m.to_json())["format"] == FORMAT  # written as v3


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"format": "other/v9"}, "format"),
        ({"batch_id": 8}, "its id says otherwise"),
        ({"stream": "../x"}, "invalid identity"),
        ({"files": [{"path": "a", "size": -1, "sha256": SHA}]}, "invalid size"),
        ({"files": [{"path": "a", "size": 1, "sha256": "nothex"}]}, "invalid sha256"),
        ({"files": [{"path": "a", "size": 1, "sha256": SHA}, {"path": "a", "size": 1, "sha256": SHA}]}, "twice"),
        ({"files": [{"path": "a", "size": 1, "sha256": SHA}, {"path": "a/b", "size": 1, "sha256": SHA}]}, "file and a directory"),
        ({"parent": "../../x"}, "invalid parent"),
        ({"parent": 7}, "invalid parent"),
        # every other field family: types and ranges, not just presence
        ({"timeline": 0}, "invalid timeline"),
        ({"timeline": "2"}, "invalid timeline"),
        ({"timeline": 2}, "timeline 2, its id says otherwise"),
        ({"watermark_ms": "oops"}, "invalid watermark_ms"),
        ({"next_watermark_ms": 1.5}, "invalid next_watermark_ms"),
        ({"batch_timestamp_ms": True}, "invalid batch_timestamp_ms"),
        ({"sources": "abc"}, "invalid sources"),
        ({"sources": [{"index": 3, "kind": "kafka"}]}, "invalid sources"),
        ({"kafka_offsets": {"t": {"0": "12"}}}, "invalid kafka_offsets"),
        ({"kafka_offsets": {"t": {"zero": 1}}}, "invalid kafka_offsets"),
        ({"kafka_offsets": ["t"]}, "invalid kafka_offsets"),
        ({"operators": [{"operator_id": -1, "name": "x", "stores": ["default"], "partitions": 1, "state_version": 1}]},
         "invalid operators"),
        ({"operators": [{"operator_id": 0, "name": "x", "stores": ["../x"], "partitions": 1, "state_version": 1}]},
         "invalid operators"),
        ({"operators": [{"operator_id": 0, "name": "x", "stores": ["default"], "partitions": 0, "state_version": 1}]},
         "invalid operators"),
        ({"operators": "x"}, "invalid operators"),
        ({"state_store": "leveldb"}, "unknown state_store"),
        ({"spark_conf": {"a": 1}}, "invalid spark_conf"),
        ({"labels": {"a": ["x"]}}, "invalid labels"),
        ({"labels": {"../k": "v"}}, "invalid label key"),
        ({"created_at": "yesterday"}, "invalid created_at"),
        ({"created_at": None}, "invalid created_at"),
        ({"query_id": {"id": 1}}, "invalid query_id"),
        ({"spark_version": 4.1}, "invalid spark_version"),
        ({"checkpoint": ["/x"]}, "invalid checkpoint"),
    ],
)
def test_malformed_manifests_are_refused(over, words) -> None:
    with pytest.raises(UnsafeManifestError, match=words):
        Manifest.from_json(doc(**over))


def test_not_json_and_wrong_identity_are_refused() -> None:
    with pytest.raises(UnsafeManifestError, match="not valid JSON"):
        Manifest.from_json(b"{nope")
    with pytest.raises(UnsafeManifestError, match="belongs to stream"):
        Manifest.from_json(doc(), expect_stream="other")


def test_snapshot_ids_sort_by_batch_then_time() -> None:
    from datetime import UTC, datetime

    ids = [new_snapshot_id(b, datetime(2026, 1, d, tzinfo=UTC)) for b, d in [(10, 1), (9, 5), (10, 2), (100, 1)]]
    assert sorted(ids) == [ids[1], ids[0], ids[2], ids[3]]


def test_stream_names_and_labels_are_validated() -> None:
    assert validate_stream_name("payments.eu-1_v2") == "payments.eu-1_v2"
    for bad in ["", "-x", "a/b", "a b", "x" * 129]:
        with pytest.raises(UsageError):
            validate_stream_name(bad)
    assert parse_labels(["a=1", "b.c=x=y"]) == {"a": "1", "b.c": "x=y"}
    with pytest.raises(UsageError, match="invalid label") as err:
        parse_labels(["novalue"])
    assert "KEY=VALUE" in err.value.one_line()


def test_v1_manifests_are_read_as_timeline_1() -> None:
    d = json.loads(doc())
    d["format"] = FORMAT_V1
    del d["timeline"]
    m = Manifest.from_json(json.dumps(d).encode())
    assert m.timeline == 1
    assert header(m.to_json())["format"] == FORMAT  # written again as v3


def test_snapshot_ids_name_their_timeline_after_the_first() -> None:
    from datetime import UTC, datetime

    when = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert new_snapshot_id(5, when) == "000000000005-20260102T030405000006Z"
    tl3 = new_snapshot_id(5, when, timeline=3)
    assert tl3 == "000000000005-20260102T030405000006Z-t3"
    assert SnapshotRef.parse(tl3) == SnapshotRef("20260102T030405000006Z", 5, 3, tl3)
    assert SnapshotRef.parse(new_snapshot_id(5, when)).timeline == 1
    for bad in ["000000000005-20260102T030405000006Z-t1", "000000000005-20260102T030405000006Z-t0", "5-x"]:
        with pytest.raises(UsageError):
            SnapshotRef.parse(bad)
