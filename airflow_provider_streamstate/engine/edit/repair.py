"""Repair a stream's state in place of a replay: keys deleted or set (engine/edit/changes.py),
or every key of a store rewritten into a new query version's schema (engine/edit/migrate.py),
in a new batch N+1 written on a verified copy of snapshot N, then swapped into the stopped
stream's checkpoint or kept as a clone.

`edit_stream` is a dry run unless `apply`: it reads the snapshot (or the checkpoint) and says
what would change, per operator, store and partition, writing nothing. Applied, it runs the
work-copy transaction a rescale runs (engine/state/work_copy.py) around a batch the engine
writes itself:

1. Refuse first: a running stream (in place), a source snapshot that is not the checkpoint's
   newest batch (in place: the edit would rewind it), what an edit cannot write (changes.py).
2. The source: the given snapshot, else a new one of the (stopped) stream.
3. Restore it to a work copy (in place: a sibling of the checkpoint; as a clone: the target)
   and write batch N+1 there (batch.py: a delta or changelog per store partition, offsets
   and commit last): the same source offsets as N, so the stream resumes where it was; a
   migration also replaces the store's schema file with the new version's.
4. Verify the copy without Spark (verify.py): the state at N+1 is the source's with exactly
   the asked changes, every other entry byte for byte, every key set where Spark looks for
   it, each changed key read back. A repair proves it from what it wrote (`verify=
   "changes"`: the source's files unchanged, the batch's files decoded, at a cost that
   follows the edit); a migration, or `verify="state"`, from two digests of the whole
   state (N and N+1). Then, with a `command`, Spark's own state reader reads the copy at
   N+1 and must agree (spark_check.py).
5. In place: pin the source snapshot (rollback is one restore of it) and swap the edit
   batch's files in behind a fence (engine/checkpoint/swap.py), refusing if a query ran or
   the checkpoint moved on meanwhile; then snapshot it, labelled `edited-from=<source>`
   with the edit's description. As a clone: the target is the clone, snapshotted under its
   name with the same labels.

What a crash leaves is what a rescale's leaves: the production checkpoint untouched and a
work copy (the next edit replaces it), or a fenced checkpoint `streamstate stream recover`
finishes from the work copy, or the edited checkpoint without its snapshot yet. The edit
batch keeps batch N's watermark: a row set older than it may be evicted by the next batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import checksum_sidecar, hadoop_crc
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.state_schemas import schema_before, schema_file
from airflow_provider_streamstate.engine.checkpoint.swap import Put
from airflow_provider_streamstate.engine.core.crash_points import crash_point
from airflow_provider_streamstate.engine.core.errors import CorruptionError, StreamstateError, UsageError
from airflow_provider_streamstate.engine.edit.batch import EditBatch, write_edit_batch
from airflow_provider_streamstate.engine.edit.changes import EditSpec, KeyChange, compile_changes
from airflow_provider_streamstate.engine.edit.migrate import Migration, migrated_changes
from airflow_provider_streamstate.engine.edit.preview import EditPreview, current_values, preview
from airflow_provider_streamstate.engine.edit.spark_check import CommandFor, ExpectedEntries, spark_check
from airflow_provider_streamstate.engine.edit.verify import BatchProof, verified_batch, verified_digest
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, state_digest
from airflow_provider_streamstate.engine.lookup.reading.sources import (
    CheckpointSource,
    SnapshotSource,
    StateSource,
)
from airflow_provider_streamstate.engine.state.work_copy import Change, WorkCopy
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.edit")

WORK_SUFFIX = ".streamstate-edit"
LABEL_FROM = "edited-from"
LABEL_EDIT = "edit"
LABEL_BY = "edited-by"
MAX_LABEL = 200  # characters of the description a label keeps (the result has it whole)
VERIFY_BY = ("changes", "state")  # what proves an edit batch: what it wrote, or the whole state's digests


class EditError(StreamstateError):
    """The edited copy did not verify; nothing was put in place."""


@dataclass(frozen=True)
class EditResult:
    stream: str
    description: str
    dry_run: bool
    preview: EditPreview
    source_snapshot: str | None  # None: a dry run of the checkpoint itself
    edited_snapshot: str | None = None  # None: a dry run, or in place but its snapshot failed
    edit_batch: int | None = None
    checkpoint: str | None = None  # where the edited state is: the stream's checkpoint, or the clone
    in_place: bool = True
    pinned: str | None = None
    spark: dict[str, Any] | None = None  # what Spark's state reader found (None: not asked)
    stores: list[dict[str, Any]] = field(default_factory=list)  # the verified digest at the edit batch (by state)
    seconds: dict[str, float] = field(default_factory=dict)
    snapshot_error: str | None = None
    verified: dict[str, Any] = field(default_factory=dict)  # what the proof read (verify.BatchProof, or by state)

    def verified_text(self) -> str:
        """What was verified, in a few words."""
        if self.verified.get("by") == "changes":
            return (f"{self.verified['records']} record(s) in {self.verified['files_decoded']} new file(s) verified, "
                    f"{self.verified['files_unchanged']} file(s) of the source unchanged")
        return f"{sum(s['entries'] for s in self.stores)} entries verified"

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "description": self.description, "dry_run": self.dry_run,
                "preview": self.preview.to_json(), "source_snapshot": self.source_snapshot,
                "edited_snapshot": self.edited_snapshot, "edit_batch": self.edit_batch, "checkpoint": self.checkpoint,
                "in_place": self.in_place, "pinned": self.pinned, "spark": self.spark, "stores": self.stores,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}, "snapshot_error": self.snapshot_error,
                "verified": self.verified}


def work_location(checkpoint: str) -> str:
    """The sibling of the checkpoint where its copy is edited (replaced by the next edit)."""
    return f"{checkpoint.rstrip('/')}{WORK_SUFFIX}"


def edit_labels(source: str, edit: EditSpec | Migration, requested_by: str | None) -> dict[str, str]:
    labels = {LABEL_FROM: source, LABEL_EDIT: edit.description[:MAX_LABEL]}
    if requested_by:
        labels[LABEL_BY] = requested_by[:MAX_LABEL]
    return labels


def edit_stream(
    store: SnapshotStore,
    stream: str,
    checkpoint: str,
    edit: EditSpec | Migration,
    *,
    apply: bool = False,
    snapshot: str | None = None,
    target: str | None = None,
    clone_name: str | None = None,
    command: CommandFor | None = None,
    requested_by: str | None = None,
    connection: Any = None,
    parallelism: int = 8,
    timeout_s: float | None = None,
    on_submit: Callable[[Any], None] | None = None,
    fs: CheckpointFS | None = None,
    verify: str = "changes",
) -> EditResult:
    """Edit the state of `stream` (checkpoint `checkpoint`) as `edit` says; see the module
    docstring. A dry run unless `apply`. In place (`target` None: the stream must be stopped)
    or as a clone at `target` (named `clone_name`, default `<stream>-edited`). `snapshot`:
    the source (an id, `latest`, `latest-good:<suite>`); default the checkpoint's newest
    batch (applied: a new snapshot of the stopped stream). `command`: how to run Spark's
    check in the stream's Spark (None: the copy is verified without Spark only). `fs`: the
    checkpoint as the caller opened it with `connection`, else opened here. `verify`:
    `changes` (a repair proved from what it wrote) or `state` (digests of the whole state
    at N and N+1; what a migration always does)."""
    if verify not in VERIFY_BY:
        raise UsageError(f"verify={verify!r} is not a way to verify an edit", hint=f"give one of {', '.join(VERIFY_BY)}")
    started = time.monotonic()
    seconds: dict[str, float] = {}
    in_place = target is None
    if not apply:
        src: StateSource = SnapshotSource(store, stream, snapshot) if snapshot else CheckpointSource(
            checkpoint, reader=CheckpointReader(fs or open_checkpoint_fs(checkpoint, connection=connection)))
        changes = _changes(src, edit)
        seen = preview(src, changes, current_values(src, changes))
        seconds["total"] = time.monotonic() - started
        return EditResult(stream, edit.description, True, seen,
                          src.manifest.snapshot_id if isinstance(src, SnapshotSource) else None,
                          in_place=in_place, seconds=seconds)
    copy = WorkCopy.open("edit", "edited", store, stream, checkpoint, work=target or work_location(checkpoint),
                         target=target, clone_name=clone_name, connection=connection, parallelism=parallelism,
                         fs=fs)
    seconds = copy.seconds
    source = copy.source(snapshot)
    copy.check_at_source(source)
    labels = edit_labels(source.snapshot_id, edit, requested_by)
    with copy.restored(source) as work_fs:
        t = time.monotonic()
        src = CheckpointSource(work_fs.location, source.batch_id, reader=CheckpointReader(work_fs))
        changes = _changes(src, edit)
        old = current_values(src, changes)
        seen = preview(src, changes, old)
        if seen.changed == 0 and not isinstance(edit, Migration):  # an empty store still takes the new schema
            raise UsageError(f"the edit changes nothing in snapshot {source.snapshot_id}: every key to delete is absent "
                             "(and no key matches delete_where)",
                             hint="check the keys (`streamstate state get`), or the operator and store")
        by_state = verify == "state" or isinstance(edit, Migration)
        before = state_digest(work_fs, source.batch_id, connection=connection, placement=False) if by_state else None
        whole: frozenset[tuple[int, str]] = frozenset()
        if isinstance(edit, Migration):  # every key of the store: its whole new state
            op_id = src.operator(edit.operator).operator_id
            whole = frozenset({(op_id, edit.store)})
        batch = write_edit_batch(work_fs, source.batch_id, changes, whole=whole)
        replaced: tuple[str, ...] = ()
        kept: tuple[str, ...] = ()
        if isinstance(edit, Migration):  # the new schema, which Spark checks the new query version against
            schema_rel = schema_file(op_id, edit.store)
            before_rel = schema_before(schema_rel, batch.batch_id)  # what the batches before the edit were written in
            if not work_fs.create_record(before_rel, work_fs.read_bytes(schema_rel)):
                raise CorruptionError(f"{work_fs.where(before_rel)} exists already: batch {batch.batch_id} was "
                                      "migrated before", hint="nothing was put in place; edit again")
            work_fs.write_record(schema_rel, edit.schema_file, content_type="application/octet-stream")
            replaced, kept = (schema_rel,), (before_rel,)
            sidecar = checksum_sidecar(schema_rel)  # Hadoop's local filesystem checks the file against it
            if work_fs.stat(sidecar) is not None:
                work_fs.write_record(sidecar, hadoop_crc(edit.schema_file), content_type="application/octet-stream")
                replaced = (schema_rel, sidecar)
        seconds["write"] = time.monotonic() - t
        crash_point("edit.written")
        t = time.monotonic()
        digest: StateDigest | None = None
        if before is not None:
            digest = _verify(work_fs, before, changes, old, connection)
            expected, verified = ExpectedEntries.of_digest(digest), {"by": "state"}
        else:
            proof = _verify_changes(work_fs, batch, changes, old, copy.restored_versions)
            expected, verified = ExpectedEntries.of_change(proof), proof.to_json()
        seconds["verify"] = time.monotonic() - t
        spark = None
        if command is not None:
            t = time.monotonic()
            spark = spark_check(stream, work_fs, batch.batch_id, expected, changes, command, timeout_s=timeout_s,
                                on_submit=on_submit).to_json()
            seconds["spark_check"] = time.monotonic() - t
        copy.promote(Change(
            batch.batch_id, labels, source.spark_version,
            files=lambda: _edit_files(work_fs, copy.restored_versions, batch, replaced, kept),
            pin_reason=f"before the edit ({edit.description}): restore it to roll back",
            description=f"edit of {stream} ({edit.description}): batch {batch.batch_id} on batch {source.batch_id}"))
    done = copy.finish()
    seconds["total"] = time.monotonic() - started
    log.info("edited %s (%s): batch %d, snapshot %s (%s)", stream, edit.description, batch.batch_id,
             done.snapshot_id, "in place" if in_place else f"clone at {copy.work}")
    return EditResult(stream, edit.description, False, seen, source.snapshot_id, done.snapshot_id, batch.batch_id,
                      done.checkpoint, in_place, done.pinned, spark,
                      [s.to_json() for s in digest.stores] if digest is not None else [], seconds,
                      done.snapshot_error, verified)


def _verify(work: CheckpointFS, before: StateDigest, changes: list[KeyChange], old: list[bytes | None],
            connection: Any) -> StateDigest:
    """The copy's digest at the edit batch, once it is exactly the expected one."""
    after = verified_digest(work, before.batch_id + 1, before, changes, old, connection=connection,
                            what="the edited copy does not hold the asked state",
                            hint="nothing was put in place; report it with the copy's location, " + work.location)
    log.info("verified the edit of %s by the state: %d entries, %d keys changed, every other entry as it was",
             work.location, sum(s.entries for s in after.stores), len(changes))
    return after


def _verify_changes(work: CheckpointFS, batch: EditBatch, changes: list[KeyChange], old: list[bytes | None],
                    restored: dict[str, tuple[int, str]]) -> BatchProof:
    """The proof, from what the edit wrote, that the copy holds exactly the asked state."""
    proof = verified_batch(work, batch, changes, old, restored, what="the edited copy does not hold the asked state",
                           hint="nothing was put in place; report it with the copy's location, " + work.location)
    log.info("verified the edit of %s: %d records in %d new files, %d keys changed, %d files of the source unchanged",
             work.location, proof.records, proof.files_decoded, len(changes), proof.files_unchanged)
    return proof


def _changes(src: StateSource, edit: EditSpec | Migration) -> list[KeyChange]:
    return migrated_changes(src, edit) if isinstance(edit, Migration) else compile_changes(src, edit)


def _edit_files(work: CheckpointFS, restored: dict[str, tuple[int, str]], batch: EditBatch,
                replaced: tuple[str, ...] = (), kept: tuple[str, ...] = ()) -> list[Put]:
    """The files the edit wrote into the copy, exactly (nothing Spark's check may have left
    there): what the swap moves in, its offsets and commit created only if absent (a query
    writing that batch meanwhile wins, and the swap refuses); `replaced`: files of the
    checkpoint the edit rewrote (a migration's schema file, and its checksum sidecar on a
    local disk); `kept`: new files beside them (the schema the migration replaced)."""
    now = work.versions()
    exclusive = {f"offsets/{batch.batch_id}", f"commits/{batch.batch_id}", *kept}
    out = [Put(rel, now[rel][0]) for rel in replaced]
    for rel in (*batch.files, *kept):
        if rel not in now or rel in restored:
            raise CorruptionError(f"{work.where(rel)}, written by the edit, is {'gone' if rel not in now else 'not new'}",
                                  hint="nothing was put in place; edit again")
        out.append(Put(rel, now[rel][0], exclusive=rel in exclusive))
    return out
