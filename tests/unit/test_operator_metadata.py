"""Operator metadata v2 (transformWithState): parsed as Spark 4.1 writes it, its schema paths
rewritten to a copy's location (with the Hadoop sidecar), and refused when it names a file
a copy could not be pointed at; the manifest keeps the operator's state variables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import (
    OffsetRewrite,
    hadoop_crc,
    rewrite_local_checkpoint,
)
from airflow_provider_streamstate.engine.checkpoint.operator_metadata import (
    ChainedRewrite,
    SchemaPathRewrite,
    parse_metadata_v2,
)
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.core.manifest import Manifest, OperatorInfo

SCHEMA = "0_3d794073-e018-42a4-9ee7-d7f5cab6ba30"
PROPS = {"timeMode": "ProcessingTime", "outputMode": "Append", "stateVariables": [
    {"stateName": "$procTimers_keyToTimestamp", "stateVariableType": "TimerState", "ttlEnabled": False},
    {"stateName": "profile", "stateVariableType": "ValueState", "ttlEnabled": False},
    {"stateName": "session", "stateVariableType": "ListState", "ttlEnabled": True}]}


def metadata_v2(root: str, schema: str = SCHEMA, op: int = 0) -> bytes:
    """`_metadata/v2/<b>` as Spark 4.1.3 writes it (one line of JSON after `v2`)."""
    doc = {"operatorInfo": {"operatorId": op, "operatorName": "transformWithStateInPandasExec"},
           "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 2,
                               "stateSchemaFilePaths": [f"{root}/state/{op}/_stateSchema/default/{schema}"]}],
           "operatorPropertiesJson": json.dumps(PROPS, separators=(",", ":"))}
    return b"v2\n" + json.dumps(doc, separators=(",", ":")).encode()


def test_metadata_v2_is_parsed_with_its_variables_and_checkpoint_relative_schema_files() -> None:
    meta = parse_metadata_v2(metadata_v2("file:/data/ckpt"), 0, "m")
    assert meta.name == "transformWithStateInPandasExec" and meta.time_mode == "ProcessingTime"
    assert meta.stores[0].schema_files == (f"state/0/_stateSchema/default/{SCHEMA}",)
    assert [(v.name, v.kind, v.ttl) for v in meta.state_variables] == [
        ("$procTimers_keyToTimestamp", "TimerState", False), ("profile", "ValueState", False),
        ("session", "ListState", True)]


@pytest.mark.parametrize("path", ["file:/elsewhere/state/1/_stateSchema/default/" + SCHEMA, "file:/etc/passwd"])
def test_a_schema_file_outside_the_operators_own_directory_is_refused(path: str) -> None:
    data = metadata_v2("file:/data/ckpt").replace(f"file:/data/ckpt/state/0/_stateSchema/default/{SCHEMA}".encode(),
                                                   path.encode())
    with pytest.raises(UnsupportedCheckpointError, match="not one of operator 0's _stateSchema files"):
        parse_metadata_v2(data, 0, "m")


def test_an_unknown_metadata_version_is_refused() -> None:
    with pytest.raises(UnsupportedCheckpointError, match="only 'v2' is understood"):
        parse_metadata_v2(b"v3\n{}", 0, "m")


@pytest.mark.parametrize("target", ["file:/restored/here", "s3a://bucket/streams/x"])
def test_the_rewrite_points_every_schema_path_at_the_copy_and_its_sidecar_follows(target: str) -> None:
    rewrite = SchemaPathRewrite(target + "/")
    rel = "state/0/_metadata/v2/4"
    new = rewrite.rewrite(rel, metadata_v2("file:/data/ckpt"))
    assert new is not None
    assert new == metadata_v2(target)
    assert rewrite.rewrite("state/0/_metadata/v2/.4.crc", b"old", {rel: new}) == hadoop_crc(new)
    assert rewrite.rewrite(rel, new) is None  # already there: nothing to write
    assert not rewrite.wants("offsets/4") and rewrite.wants(rel) and rewrite.wants("state/0/_metadata/v2/.4.crc")


def test_a_chained_rewrite_applies_offsets_and_schema_paths_to_one_local_copy(tmp_path: Path) -> None:
    root = tmp_path / "copy"
    (root / "offsets").mkdir(parents=True)
    (root / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"t":{"0":5}}')
    v2 = root / "state/0/_metadata/v2"
    v2.mkdir(parents=True)
    (v2 / "0").write_bytes(metadata_v2("file:/data/ckpt"))
    (v2 / ".0.crc").write_bytes(hadoop_crc(metadata_v2("file:/data/ckpt")))
    changed = rewrite_local_checkpoint(root, ChainedRewrite(OffsetRewrite({"t": "t"}, {"t": {"0": 9}}),
                                                            SchemaPathRewrite(f"file:{root}")))
    assert changed == ["offsets/3", "state/0/_metadata/v2/0"]
    assert (root / "offsets/3").read_text().endswith('{"t":{"0":9}}')
    assert (v2 / "0").read_bytes() == metadata_v2(f"file:{root}")
    assert (v2 / ".0.crc").read_bytes() == hadoop_crc(metadata_v2(f"file:{root}"))


def _checkpoint(tmp_path: Path, v2_batches: dict[int, str]) -> Path:
    """A minimal transformWithState checkpoint committed up to batch 3 (RocksDB, changelogs)."""
    root = tmp_path / "ckpt"
    conf = {"spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"q"}')
    for b in range(4):
        (root / "offsets" / str(b)).write_text("v1\n" + json.dumps({"batchWatermarkMs": 0, "conf": conf}) + '\n{"t":{"0":1}}')
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    for part in ("0", "1"):
        d = root / "state/0" / part
        d.mkdir(parents=True)
        for v in range(1, 5):
            (d / f"{v}.changelog").write_bytes(b"x")
    for b, schema in v2_batches.items():
        (root / "state/0/_metadata/v2").mkdir(parents=True, exist_ok=True)
        (root / "state/0/_metadata/v2" / str(b)).write_bytes(metadata_v2(f"file:{root}", schema))
        (root / "state/0/_stateSchema/default").mkdir(parents=True, exist_ok=True)
        (root / "state/0/_stateSchema/default" / schema).write_bytes(b"v3")
    return root


def test_a_cut_takes_the_metadata_at_or_below_its_batch_and_the_schema_files_they_name(tmp_path: Path) -> None:
    later = "4_aaaaaaaa-e018-42a4-9ee7-d7f5cab6ba30"
    root = _checkpoint(tmp_path, {0: SCHEMA, 4: later})  # batch 4 started (a new run), not committed
    plan = CheckpointReader(str(root)).plan()
    paths = {f.path: f.essential for f in plan.files}
    assert paths["state/0/_metadata/v2/0"] and paths[f"state/0/_stateSchema/default/{SCHEMA}"]
    assert "state/0/_metadata/v2/4" not in paths and f"state/0/_stateSchema/default/{later}" not in paths
    (op,) = plan.operators
    assert op["name"] == "transformWithStateInPandasExec" and op["time_mode"] == "ProcessingTime"
    assert [v["name"] for v in op["state_variables"]] == ["$procTimers_keyToTimestamp", "profile", "session"]


def test_a_cut_whose_metadata_names_a_missing_schema_file_is_retried_not_copied_half(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path, {0: SCHEMA})
    shutil.rmtree(root / "state/0/_stateSchema")
    (root / "state/0/_stateSchema/default").mkdir(parents=True)
    from airflow_provider_streamstate.engine.core.errors import CheckpointChanged

    with pytest.raises(CheckpointChanged, match="vanished"):
        CheckpointReader(str(root)).plan()


def test_the_manifest_keeps_state_variables_and_leaves_other_operators_as_they_were() -> None:
    from dataclasses import replace

    from tests.unit.test_manifest import doc

    tws = OperatorInfo(0, "transformWithStateInPandasExec", ["default"], 2, 4,
                       [{"name": "profile", "kind": "ValueState", "ttl": False}], "ProcessingTime")
    agg = OperatorInfo(1, "stateStoreSave", ["default"], 2, 4)
    m = replace(Manifest.from_json(doc()), operators=[tws, agg])
    header, _, files = m.to_json().partition(b"\n")  # a v3 manifest: its header line, then the file list
    d = json.loads(header)
    assert "state_variables" not in d["operators"][1] and d["operators"][0]["time_mode"] == "ProcessingTime"
    back = Manifest.from_json(m.to_json())
    assert back.operators == [tws, agg]
    assert back.operators[0].variable("profile") == {"name": "profile", "kind": "ValueState", "ttl": False}
    bad = json.loads(header)
    bad["operators"][0]["state_variables"] = [{"name": "profile"}]
    with pytest.raises(UnsafeManifestError, match="state variables"):
        Manifest.from_json(json.dumps(bad).encode() + b"\n" + files)
