"""Prove an edit batch before anything relies on it, without Spark: the state at N+1 is the
state at N with exactly the asked changes. Two proofs, by what they read:

**The changes** (`verified_batch`, a repair's default): what the edit wrote and nothing else,
so its cost follows the edit, not the state. Spark loads state version N+2 of a partition
as version N+1 with that version's one new file applied (a delta or a changelog; in
checkpoint format 2 the changelog's lineage names the versions below it), and the copy's
files of version N+1 and below are the source snapshot's, each byte checked against its
sha256 by the restore. So the state at N+1 is the source's with exactly the asked changes
when: every restored file is still there unchanged and the only new files are the edit
batch's (a fresh listing); `offsets/N+1` is `offsets/N` and `commits/N+1` is `commits/N`
but for the state files' ids; each partition's files at N+1 are its files at N plus the
one new file, named as the edit writes it (in format 2: the id the commit names, its
lineage the source's with version N+1 added); each new file, decoded by the engine's
readers (not by the code that wrote it), holds exactly the asked records of its partition;
every changed key is in the partition Spark's hash of its stored bytes gives; and each
changed key read back through the whole load path at N+1 is gone or holds the asked bytes.

**The state** (`verified_digest`: a migration, a bootstrap, or asked for): a state digest
(engine/lookup/digest.py) sums a 128-bit hash of every stored (key, value) per operator
and store, so the digest the edit must produce is computable from the source's
digest and the changed keys alone: minus each changed key's old entry, plus its new one.
The edited copy's digest at N+1, read back with the engine's own decoders, must equal it:
every key the edit did not select is byte-identical to the source (an extra, lost or
altered entry anywhere changes a count or the sum), and every key is in the partition
Spark looks for it in. Then each selected key is read back on its own: gone, or holding
exactly the bytes asked for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import SIDECAR_DIR
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import CorruptionError, StreamstateError
from airflow_provider_streamstate.engine.edit.batch import EditBatch
from airflow_provider_streamstate.engine.edit.changes import KeyChange, provider_of
from airflow_provider_streamstate.engine.edit.preview import current_values
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, StoreDigest, state_digest
from airflow_provider_streamstate.engine.lookup.digest_tasks import MASK, placement_schemas
from airflow_provider_streamstate.engine.lookup.encodings import rocksdb_keys as rk
from airflow_provider_streamstate.engine.lookup.encodings.placement import row_partitioner
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import RowFormatError
from airflow_provider_streamstate.engine.lookup.formats.codec import codec_name, decompress
from airflow_provider_streamstate.engine.lookup.formats.hdfs_state import iter_records
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import (
    DELETE,
    PUT,
    changelog_lineage,
    parse_changelog,
)
from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource, StateSource

Record = tuple[bytes, bytes | None]  # (stored key, stored value or None for a removal)
_NOT_ASKED = object()


def entry_hash(key: bytes, value: bytes) -> int:
    """One stored entry's hash as a digest sums it (digest_tasks._digest_entries)."""
    import xxhash

    return xxhash.xxh3_128_intdigest(len(key).to_bytes(4, "little") + key + value)


def expected_digest(before: StateDigest, changes: Sequence[KeyChange], old: Sequence[bytes | None]) -> StateDigest:
    """The digest of the state after `changes`, from the digest `before` and each changed
    key's value there (`old`, None where absent)."""
    bases = {(s.operator_id, s.store): s for s in before.stores}
    sums = {k: [s.entries, int(s.fingerprint, 16)] for k, s in bases.items()}
    for c, was in zip(changes, old, strict=True):
        where = (c.operator_id, c.store)
        if where not in bases:  # a store without entries anywhere has no digest line yet
            bases[where] = StoreDigest(c.operator_id, c.operator, c.store, 0, f"{0:032x}", before.placement)
            sums[where] = [0, 0]
        acc = sums[where]
        if was is not None:
            acc[0] -= 1
            acc[1] -= entry_hash(c.key_bytes, was)
        if c.value_bytes is not None:
            acc[0] += 1
            acc[1] += entry_hash(c.key_bytes, c.value_bytes)
    out = tuple(replace(bases[k], entries=sums[k][0], fingerprint=f"{sums[k][1] & MASK:032x}") for k in sorted(bases))
    return replace(before, batch_id=before.batch_id + 1, stores=out, misplaced=(), misplaced_keys=0, unreadable=())


def edit_problems(expected: StateDigest, after: StateDigest, src_after: StateSource,
                  changes: Sequence[KeyChange]) -> list[str]:
    """What is wrong with the edited state (`after`, its digest at N+1; `src_after`, the
    copy at N+1): empty when it holds exactly the expected entries, each in its place, and
    each changed key as asked."""
    problems = [f"batch {after.batch_id}: {u}" for u in after.unreadable]
    if after.batch_id != expected.batch_id:
        problems.append(f"the edited digest is of batch {after.batch_id}, not of the edit batch {expected.batch_id}")
    problems += [p.replace(expected.source, "the expected state") for p in after.same_entries(expected)]
    problems += list(after.misplaced)
    if after.misplaced_keys > len(after.misplaced):
        problems.append(f"{after.misplaced_keys - len(after.misplaced)} more keys are not where Spark looks for them")
    return problems + read_back_problems(src_after, changes, after.batch_id)


def read_back_problems(src_after: StateSource, changes: Sequence[KeyChange], batch_id: int) -> list[str]:
    """Each changed key looked up at the edit batch (`src_after`), through the whole load
    path: gone, or holding exactly the asked bytes."""
    problems = []
    for c, now in zip(changes, current_values(src_after, changes), strict=True):
        if now != c.value_bytes:
            want = "absent" if c.value_bytes is None else f"set to {c.value}"
            got = "absent" if now is None else "another value" if c.value_bytes is not None else "still there"
            problems.append(f"key {c.key} of operator {c.operator_id} should be {want} at batch {batch_id}, is {got}")
    return problems


def verified_digest(fs: CheckpointFS, batch_id: int, before: StateDigest | None, changes: Sequence[KeyChange],
                    old: Sequence[bytes | None], *, what: str, hint: str, connection: Any = None) -> StateDigest:
    """The digest of the checkpoint `fs` at `batch_id`, once it holds exactly `before` (None:
    no entries at all, a new checkpoint) with `changes`, each key in its place and read back;
    CorruptionError naming the first problem (`what` does not hold ...) otherwise."""
    after = state_digest(fs, batch_id, connection=connection)
    if before is None:
        before = replace(after, batch_id=batch_id - 1,
                         stores=tuple(replace(s, entries=0, fingerprint=f"{0:032x}") for s in after.stores))
    src = CheckpointSource(fs.location, batch_id, reader=CheckpointReader(fs.fresh()))
    problems = edit_problems(expected_digest(before, changes, old), after, src, changes)
    _raise_first(problems, what, hint)
    return after


def _raise_first(problems: list[str], what: str, hint: str) -> None:
    if problems:
        raise CorruptionError(f"{what}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                                           else ""), hint=hint)


@dataclass(frozen=True)
class StoreChange:
    """What an edit batch proved of one store of one operator: how many keys it deleted,
    added and replaced, and whether each key it set was placed by Spark's hash."""

    operator_id: int
    operator: str
    store: str
    deleted: int = 0
    added: int = 0
    replaced: int = 0
    placement_checked: bool = False

    @property
    def label(self) -> str:
        return f"{self.operator_id}/{self.store}"

    @property
    def entries_change(self) -> int:
        return self.added - self.deleted

    def to_json(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "operator": self.operator, "store": self.store,
                "deleted": self.deleted, "added": self.added, "replaced": self.replaced,
                "entries_change": self.entries_change, "placement_checked": self.placement_checked}


@dataclass(frozen=True)
class BatchProof:
    """What `verified_batch` read to prove an edit batch: the batch's state files decoded,
    the records in them, the files of the source checked unchanged, each store's change."""

    batch_id: int
    files_decoded: int
    records: int
    files_unchanged: int
    keys_read_back: int
    stores: tuple[StoreChange, ...]

    def to_json(self) -> dict[str, Any]:
        return {"by": "changes", "batch_id": self.batch_id, "files_decoded": self.files_decoded,
                "records": self.records, "files_unchanged": self.files_unchanged,
                "keys_read_back": self.keys_read_back, "stores": [s.to_json() for s in self.stores]}


def _place(rel: str) -> tuple[int, str, int]:
    """(operator, store, partition) of a state file `state/<op>/<part>[/<store>]/<name>`."""
    parts = rel.split("/")
    try:
        return int(parts[1]), (parts[3] if len(parts) == 5 else "default"), int(parts[2])
    except (IndexError, ValueError):
        raise CorruptionError(f"{rel} is not a state file of a store partition") from None


def _decompressed(fs: CheckpointFS, rel: str, codec: str) -> bytes:
    return decompress(fs.read_bytes(rel), codec, fs.where(rel))


def decoded_records(data: bytes, where: str, provider: str) -> list[Record]:
    """The records of one decompressed delta or changelog (version 1 or 3), as the engine's
    readers decode them; CorruptionError for anything else (a merge, a typed changelog)."""
    if provider == "hdfs":
        return list(iter_records(iter([data]), where, removals=True))
    version, records = parse_changelog(data, where)
    if version not in (1, 3) or any(kind not in (PUT, DELETE) for kind, _, _ in records):
        raise CorruptionError(f"{where} is a changelog of version {version} with typed records, which an edit of "
                              "a store without column families does not write")
    return [(key, None if kind == DELETE else value) for kind, key, value in records]


def _logs_problems(fs: CheckpointFS, n: int) -> list[str]:
    """`offsets/n` must be `offsets/n-1` byte for byte (the stream resumes where it was) and
    `commits/n` must be `commits/n-1` but for the state files' unique ids."""
    out = []
    if fs.read_bytes(f"offsets/{n}") != fs.read_bytes(f"offsets/{n - 1}"):
        out.append(f"{fs.where(f'offsets/{n}')} is not offsets/{n - 1} byte for byte")
    (head_a, _, body_a), (head_b, _, body_b) = (fs.read_bytes(f"commits/{b}").partition(b"\n") for b in (n - 1, n))
    try:
        a, b = json.loads(body_a or b"{}"), json.loads(body_b or b"{}")
    except ValueError:
        return [*out, f"{fs.where(f'commits/{n}')} is not a commit Spark wrote or an edit writes"]
    for d in (a, b):
        d.pop("stateUniqueIds", None)
    if head_a != head_b or a != b:
        out.append(f"{fs.where(f'commits/{n}')} differs from commits/{n - 1} in more than its state files' ids")
    return out


def _file_problems(fs: CheckpointFS, rel: str, data: bytes, version: int, provider: str, codec: str, ids: Any,
                   prev_ids: Any) -> list[str]:
    """What is wrong with the name of a new state file of `version` (`data`: its bytes,
    decompressed), and, in checkpoint format 2 (`ids`: the edit batch's commit's unique ids,
    `prev_ids`: the batch before's), with the lineage Spark's loader follows from it: the
    source's lineage of version `version - 1` with that version added."""
    op, store, part = _place(rel)
    name = rel.rsplit("/", 1)[1]
    store_rel = rel.rsplit("/", 1)[0]
    if provider == "hdfs":
        return [] if name == f"{version}.delta" else [f"{fs.where(rel)} is not the {version}.delta an edit writes"]
    if ids is None:
        return [] if name == f"{version}.changelog" else [
            f"{fs.where(rel)} is not the {version}.changelog an edit writes"]
    try:
        (uid,), (prev,) = ids[str(op)][part], prev_ids[str(op)][part]
    except (KeyError, IndexError, TypeError, ValueError):
        return [f"the commits name no single state file id for operator {op} partition {part} of store {store}"]
    if name != f"{version}_{uid}.changelog":
        return [f"{fs.where(rel)} is not the {version}_{uid}.changelog the edit batch's commit names"]
    below_rel = f"{store_rel}/{version - 1}_{prev}.changelog"
    below = changelog_lineage(_decompressed(fs, below_rel, codec), fs.where(below_rel)) \
        if fs.stat(below_rel) is not None else []
    lineage = changelog_lineage(data, fs.where(rel))
    if lineage != [*below, (version - 1, str(prev))]:
        return [f"{fs.where(rel)} carries the lineage {lineage}, not the source's {below} with version "
                f"{version - 1} ({prev}) added: Spark would load other files"]
    return []


def verified_batch(fs: CheckpointFS, batch: EditBatch, changes: Sequence[KeyChange], old: Sequence[bytes | None],
                   restored: dict[str, tuple[int, str]], *, what: str, hint: str) -> BatchProof:
    """The proof that the copy `fs` at `batch.batch_id` holds its state at the batch before
    with exactly `changes` (`old`: each changed key's value there, None where absent), read
    from the edit batch's files alone (the module docstring); `restored`: the copy's files
    as the restore of the source left them (`CheckpointFS.versions`). CorruptionError naming
    the first problem (`what`: ...) otherwise."""
    n = batch.batch_id
    problems: list[str] = []
    now = {rel: v for rel, v in fs.versions().items() if not rel.startswith(f"{SIDECAR_DIR}/")}
    source = {rel: v for rel, v in restored.items() if not rel.startswith(f"{SIDECAR_DIR}/")}
    for rel, v in sorted(source.items()):
        if now.get(rel) != v:
            problems.append(f"{fs.where(rel)}, restored from the source snapshot, "
                            f"{'is gone' if rel not in now else 'was written again'}")
    written = set(batch.files)
    problems += [f"{fs.where(rel)} appeared beside the edit batch" for rel in sorted(set(now) - set(source) - written)]
    problems += [f"{fs.where(rel)}, written by the edit, is gone" for rel in sorted(written - set(now))]
    _raise_first(problems, what, hint)
    problems += _logs_problems(fs, n)
    reader = CheckpointReader(fs.fresh())
    try:
        cut, cut_before = reader.plan(n), CheckpointReader(fs.fresh()).plan(n - 1)
    except StreamstateError as exc:
        problems.append(f"its batch {n} or {n - 1} cannot be planned: {exc}")
        _raise_first(problems, what, hint)
        raise  # unreachable: problems is not empty
    provider, codec = provider_of(cut.conf, reader.where), codec_name(cut.conf)
    new_state = {rel for rel in batch.files if rel.startswith("state/")}
    loaded, loaded_before = ({f.path for f in c.files if f.path.startswith("state/")} for c in (cut, cut_before))
    problems += [f"{fs.where(rel)} is loaded at batch {n} but is neither batch {n - 1}'s nor the edit's"
                 for rel in sorted(loaded - loaded_before - new_state)]
    problems += [f"{fs.where(rel)}, loaded at batch {n - 1} or written by the edit, is not loaded at batch {n}"
                 for rel in sorted((loaded_before | new_state) - loaded)]
    ids = reader.commit(n).get("stateUniqueIds") if cut.checkpoint_format == 2 else None
    prev_ids = reader.commit(n - 1).get("stateUniqueIds") if ids is not None else None
    asked: dict[tuple[int, str, int], dict[bytes, bytes | None]] = {}
    for c in changes:
        asked.setdefault(c.where, {})[c.key_bytes] = c.value_bytes
    files = records = 0
    for rel in sorted(new_state):
        files += 1
        try:
            data = _decompressed(fs, rel, codec)
            problems += _file_problems(fs, rel, data, n + 1, provider, codec, ids, prev_ids)
            found = decoded_records(data, fs.where(rel), provider)
            want = asked.pop(_place(rel), {})
        except StreamstateError as exc:
            problems.append(str(exc))
            continue
        records += len(found)
        if len(found) != len(want) or dict(found) != want:
            differ = len(set(found) ^ set(want.items())) + len(found) - len(dict(found))
            problems.append(f"{fs.where(rel)} holds {len(found)} record(s), the edit asked for {len(want)} "
                            f"({differ} differ)")
    problems += [f"operator {op} store {store} partition {part}: the edit batch has no file for its changes"
                 for op, store, part in sorted(asked)]
    stores = _store_changes(CheckpointSource(fs.location, n, reader=reader), cut.operators, changes, old,
                            provider, problems)
    _raise_first(problems, what, hint)
    problems += read_back_problems(CheckpointSource(fs.location, n, reader=CheckpointReader(fs.fresh())), changes, n)
    _raise_first(problems, what, hint)
    return BatchProof(n, files, records, len(source), len(changes), stores)


def _store_changes(src: CheckpointSource, operators: list[dict[str, Any]], changes: Sequence[KeyChange],
                   old: Sequence[bytes | None], provider: str, problems: list[str]) -> tuple[StoreChange, ...]:
    """Each store's change (every store of every operator, unchanged ones too: Spark's check
    loads them all), each changed key placed by Spark's hash of its stored bytes where the
    operator's stored key is the one Spark partitions by; misplaced keys go to `problems`."""
    base = 0 if provider == "hdfs" else len(rk.VERSION)
    out = []
    for d in operators:
        op = src.operator(int(d["operator_id"]))
        mine = [(c, was) for c, was in zip(changes, old, strict=True) if c.operator_id == op.operator_id]
        schemas = placement_schemas(src, op) if mine else {}
        for store in op.stores:
            here = [(c, was) for c, was in mine if c.store == store]
            schema = schemas.get(store)
            place = row_partitioner(schema, op.partitions) if schema is not None else None
            for c, _ in here:  # a delete in another partition than Spark's would leave the key where it is
                if place is None:
                    continue
                try:
                    expected = place(c.key_bytes, base)
                except RowFormatError as exc:
                    problems.append(f"key {c.key} of operator {op.operator_id} is not a row of its key schema ({exc})")
                    continue
                if expected != c.partition:
                    problems.append(f"key {c.key} of operator {op.operator_id} store {store} is written to partition "
                                    f"{c.partition}, Spark looks for it in {expected}")
            out.append(StoreChange(op.operator_id, op.name, store,
                                   deleted=sum(1 for c, was in here if c.value_bytes is None and was is not None),
                                   added=sum(1 for c, was in here if c.value_bytes is not None and was is None),
                                   replaced=sum(1 for c, was in here if c.value_bytes is not None and was is not None),
                                   placement_checked=place is not None))
    return tuple(out)
