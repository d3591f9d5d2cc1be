"""What failover writes into a restored checkpoint: every place Spark names Kafka topics and
offsets now names the DR topics and translated offsets, with checksum sidecars Hadoop accepts;
nothing else changes. And the topic map refuses names the checkpoint does not read."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import hadoop_crc
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.dr.failover import (
    DrRewrite,
    TopicMap,
    TranslatedPartition,
    Translation,
)
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

# A sidecar Spark 4.1 (Hadoop's local filesystem) wrote for `{"id":"6f02b52d-c2f2-49ac-9550-b9c4303a0417"}`.
SPARK_METADATA = b'{"id":"6f02b52d-c2f2-49ac-9550-b9c4303a0417"}'
SPARK_METADATA_CRC = b"crc\x00\x00\x00\x02\x00\x11v\xb0>"


def translation() -> Translation:
    return Translation("000000000002-20261121T101500123456Z", 2, [
        TranslatedPartition("tx", 0, "primary.tx", 30, 27, 40),
        TranslatedPartition("tx", 1, "primary.tx", 60, 51, 51),
    ], 0.01)


def rewrite_checkpoint(root: Path, translation: Translation) -> tuple[Path, list[str]]:
    """`root` snapshotted and restored for the DR cluster (the failover's own path): the
    restored copy, and the files it wrote with other content than the snapshot's."""
    for d in store_dirs(root):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v}")
    store = LocalStore(root.parent / "store", fsync=False)
    sid = create_snapshot(str(root), store, "s").manifest.snapshot_id
    target = root.parent / "restored"
    result = restore_snapshot(store, "s", sid, target, fsync=False, rewrite=DrRewrite(translation))
    return target, [r for r in result.rewritten if not r.endswith(".crc")]


def test_hadoop_checksums_match_what_spark_wrote() -> None:
    assert hadoop_crc(SPARK_METADATA) == SPARK_METADATA_CRC
    big = bytes(range(256)) * 5
    assert hadoop_crc(big) == b"crc\x00" + struct.pack(">i", 512) + b"".join(
        struct.pack(">I", zlib.crc32(big[i:i + 512])) for i in range(0, len(big), 512))


def test_every_offsets_file_and_the_initial_offsets_name_the_dr_topics_and_offsets(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ck", batches=3)
    write(root / "sources/0/0", b'\x00v1\n{"tx":{"0":0,"1":0}}')
    write(root / "sources/0/.0.crc", hadoop_crc(b"old"))
    write(root / "offsets/.2.crc", hadoop_crc(b"old"))
    before_meta = (root / "offsets/2").read_text().split("\n")[1]
    root, changed = rewrite_checkpoint(root, translation())
    assert changed == ["offsets/0", "offsets/1", "offsets/2", "sources/0/0"]
    lines = (root / "offsets/2").read_text().split("\n")
    assert lines[0] == "v1"
    assert lines[1] == before_meta  # watermark, batch time and pinned confs untouched
    assert json.loads(lines[2]) == {"primary.tx": {"0": 27, "1": 51}}
    assert (root / "offsets/.2.crc").read_bytes() == hadoop_crc((root / "offsets/2").read_bytes())
    src = (root / "sources/0/0").read_bytes()
    assert src.startswith(b"\x00v1\n")
    assert json.loads(src[4:]) == {"primary.tx": {"0": 27, "1": 51}}
    assert (root / "sources/0/.0.crc").read_bytes() == hadoop_crc(src)
    assert not (root / "offsets/.0.crc").exists()  # no sidecar before, none invented
    assert "tx\"" not in (root / "offsets/0").read_text().replace("primary.tx\"", "")


def test_sources_that_are_not_the_translated_kafka_topics_are_left_alone(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ck", batches=1)
    text = (root / "offsets/0").read_text() + '\n{"logOffset":4}\n-'
    write(root / "offsets/0", text)
    root, _ = rewrite_checkpoint(root, translation())
    lines = (root / "offsets/0").read_text().split("\n")
    assert lines[3:] == ['{"logOffset":4}', "-"]


def test_topic_names_follow_the_map_then_the_replication_policy() -> None:
    assert TopicMap().dr_topic("tx") == "primary.tx"
    assert TopicMap(policy="default", source_alias="east").dr_topic("tx") == "east.tx"
    assert TopicMap(policy="identity").dr_topic("tx") == "tx"
    assert TopicMap.parse(["tx=dr-tx"], policy="identity").dr_topic("tx") == "dr-tx"


@pytest.mark.parametrize("items", [["tx"], ["=x"], ["tx="]])
def test_a_malformed_topic_map_is_refused(items: list[str]) -> None:
    with pytest.raises(UsageError, match="invalid topic map"):
        TopicMap.parse(items)


def test_a_topic_map_naming_no_topic_of_the_checkpoint_is_refused() -> None:
    with pytest.raises(UsageError, match="--topic-map names payments, which the checkpoint does not read"):
        TopicMap.parse(["payments=primary.payments"]).check({"tx"})


def test_an_unknown_replication_policy_is_refused() -> None:
    with pytest.raises(UsageError, match="unknown replication policy"):
        TopicMap(policy="prefix")
