"""Write an edit's batch N+1 into a copy of a checkpoint cut at committed batch N: the state
files of version N+2 for every store partition of every stateful operator (engine/edit/
state_files.py), then `offsets/N+1`, then `commits/N+1`, in that order, each created only
if absent.

`offsets/N+1` is `offsets/N` byte for byte (the same source offsets, watermark, batch
timestamp and pinned confs), so a restarted query runs batch N+2 from where batch N ended:
no input is replayed or skipped. `commits/N+1` is `commits/N`, or in checkpoint format 2 the
same JSON with new `stateUniqueIds`, one new id per store partition, naming the changelogs
written here. Until the commit exists Spark would run batch N+1 again from N's state (its
offsets are N's: it would recompute N's output), so the commit is written last: a copy
without it is never promoted (engine/edit/repair.py verifies the whole batch first).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.edit.changes import KeyChange, provider_of
from airflow_provider_streamstate.engine.edit.state_files import Op, changelog_file, delta_file, snapshot_file
from airflow_provider_streamstate.engine.lookup.formats.codec import codec_name, decompress

_V2_NAME = "{version}_{uid}.changelog"


@dataclass(frozen=True)
class EditBatch:
    """What an edit wrote: batch `batch_id` (= N+1), state version `batch_id + 1`."""

    batch_id: int
    files: tuple[str, ...]  # in the order written: state files, offsets, commit
    bytes_written: int
    unique_ids: dict[str, list[list[str]]] | None  # format 2: the new ids, as the commit names them

    def to_json(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "files": list(self.files), "bytes_written": self.bytes_written,
                "unique_ids": self.unique_ids}


def _lineage(fs: CheckpointFS, store_rel: str, version: int, uid: str, codec: str) -> list[tuple[int, str]]:
    """The lineage of the changelog of version `version + 1`: that of version `version`'s
    changelog with version `version` itself added (just it when that version is a zip)."""
    rel = f"{store_rel}/{_V2_NAME.format(version=version, uid=uid)}"
    below: list[tuple[int, str]] = []
    if fs.stat(rel) is not None:
        data = decompress(fs.read_bytes(rel), codec, fs.where(rel))
        n = int.from_bytes(data[:2], "big")
        if data[2:2 + n] in (b"v3", b"v4"):
            m = int.from_bytes(data[2 + n:4 + n], "big")
            below = [(int(e["version"]), str(e["checkpointUniqueId"]))
                     for e in json.loads(data[4 + n:4 + n + m].decode("utf-8"))]
    return [*below, (version, uid)]


def _taken(fs: CheckpointFS, store_rel: str, version: int) -> str | None:
    """A file of state version `version` already in the store directory, if any."""
    pattern = re.compile(rf"^\.?{version}(?:_[0-9a-fA-F-]+)?\.(delta|snapshot|zip|changelog)(\.crc)?$")
    for name in fs.listdir(store_rel) if fs.is_dir(store_rel) else []:
        if pattern.match(name):
            return name
    return None


def write_edit_batch(fs: CheckpointFS, batch_id: int, changes: Sequence[KeyChange], *,
                     whole: frozenset[tuple[int, str]] = frozenset()) -> EditBatch:
    """Write batch `batch_id + 1` holding batch `batch_id`'s state with `changes` applied,
    into the checkpoint copy `fs`, which must end at committed batch `batch_id` (a restored
    snapshot's cut does). CheckpointChanged when it does not, or when a file to write exists.
    `whole`: (operator, store) whose changes are its whole new state (a migration's): an
    HDFS-backed store gets a `.snapshot` of the version, which Spark loads without the older
    files (whose rows are in the old format)."""
    reader = CheckpointReader(fs)
    n = batch_id
    offsets, commits = reader.offset_batches(), reader.committed_batches()
    if (offsets[-1] if offsets else None, commits[-1] if commits else None) != (n, n):
        raise CheckpointChanged(f"{fs.location} does not end at committed batch {n} (offsets to "
                                f"{offsets[-1] if offsets else None}, commits to {commits[-1] if commits else None})",
                                hint="edit a copy restored from a snapshot of batch N")
    cut = reader.plan(n)
    provider = provider_of(cut.conf, reader.where)
    codec = codec_name(cut.conf)
    version = n + 2
    commit = reader.commit(n)
    old_ids = commit.get("stateUniqueIds") if cut.checkpoint_format == 2 else None
    by_place: dict[tuple[int, str, int], list[Op]] = {}
    for c in changes:
        by_place.setdefault(c.where, []).append((c.key_bytes, c.value_bytes))
    planned: list[tuple[str, bytes]] = []
    new_ids: dict[str, list[list[str]]] | None = {} if old_ids is not None else None
    for op in cut.operators:
        op_id = int(op["operator_id"])
        stores = list(op["stores"])
        for part in range(int(op["partitions"])):
            for store in stores:
                store_rel = f"state/{op_id}/{part}" if store == "default" else f"state/{op_id}/{part}/{store}"
                taken = _taken(fs, store_rel, version)
                if taken is not None:
                    raise CheckpointChanged(f"{fs.where(store_rel)} already holds {taken} of state version {version}",
                                            hint="edit a copy restored from a snapshot of batch N")
                ops = sorted(by_place.pop((op_id, store, part), []))
                if provider == "hdfs" and (op_id, store) in whole:
                    planned.append((f"{store_rel}/{version}.snapshot", snapshot_file(ops, codec)))
                elif provider == "hdfs":
                    planned.append((f"{store_rel}/{version}.delta", delta_file(ops, codec)))
                elif new_ids is None:
                    planned.append((f"{store_rel}/{version}.changelog", changelog_file(ops, codec)))
                else:
                    assert old_ids is not None
                    try:
                        (uid,) = old_ids[str(op_id)][part]
                    except (KeyError, IndexError, TypeError, ValueError):
                        raise UnsupportedCheckpointError(
                            f"commits/{n} of {reader.where} names no single state file id for operator {op_id} "
                            f"partition {part}", hint="state edits write format 2 for single-store operators") from None
                    fresh = str(uuid.uuid4())
                    new_ids.setdefault(str(op_id), []).append([fresh])
                    lineage = _lineage(fs, store_rel, version - 1, str(uid), codec)
                    planned.append((f"{store_rel}/{_V2_NAME.format(version=version, uid=fresh)}",
                                    changelog_file(ops, codec, lineage)))
    if by_place:
        (op_id, store, part), _ = next(iter(by_place.items()))
        raise CheckpointChanged(f"{reader.where} has no store {store!r} partition {part} of operator {op_id} at "
                                f"batch {n}", hint="compile the edit against the same checkpoint")
    planned.append((f"offsets/{n + 1}", fs.read_bytes(f"offsets/{n}")))
    if new_ids is None:
        planned.append((f"commits/{n + 1}", fs.read_bytes(f"commits/{n}")))
    else:
        head = fs.read_bytes(f"commits/{n}").split(b"\n", 1)[0]
        body = {**commit, "stateUniqueIds": new_ids}
        planned.append((f"commits/{n + 1}", head + b"\n" + json.dumps(body, separators=(",", ":")).encode()))
    written = 0
    for rel, data in planned:
        if not fs.create_record(rel, data):
            raise CheckpointChanged(f"{fs.where(rel)} appeared while the edit was written",
                                    hint="nothing may run on the copy being edited; edit again")
        written += len(data)
    return EditBatch(n + 1, tuple(rel for rel, _ in planned), written, new_ids)
