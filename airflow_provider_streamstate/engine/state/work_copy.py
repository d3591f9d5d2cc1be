"""An offline change of a stopped stream's state, made on a work copy of a snapshot and only
then put in place: the transaction a rescale (engine/state/rescale.py) and a key edit
(engine/edit/repair.py) share around their own work.

1. `WorkCopy.open`: in place, a crashed swap of the checkpoint is finished first and a
   running stream refused; as a clone, a target that is the checkpoint itself is refused.
2. `source`: the given snapshot, else a new one of the stopped stream; `check_at_source`
   (in place): the checkpoint is still at the source's batch, or the change would rewind it.
3. `restored` (a context): the source restored to the work copy (in place: a sibling of
   the checkpoint, replacing what a crashed change left; as a clone: the target), where the
   flow writes and verifies its new batch. Whatever fails there removes the copy.
4. `promote`, inside it: in place, the source snapshot pinned (rollback is one restore of
   it) and the new batch's files swapped in behind a fence (engine/checkpoint/swap.py),
   unpinned when the swap refuses; as a clone, the copy snapshotted under the clone's name.
5. `finish`, after it: in place, the work copy removed and the changed checkpoint
   snapshotted (a snapshot that fails is recorded in `Promoted.snapshot_error`, not raised:
   the change is in place already); as a clone, where the clone and its snapshot are.

Crash points (tests kill the process at them): `<doing>.restored`, `<doing>.verified` and
`<doing>.swapped`, with `doing` `rescale` or `edit`; the flow adds its own in between.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot, unpin_snapshot
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.swap import Put, apply_swap, new_record, recover_swap
from airflow_provider_streamstate.engine.core.crash_points import crash_point
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    StreamRunningError,
    StreamstateError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams import launcher

log = logging.getLogger("streamstate.work_copy")


@dataclass(frozen=True)
class Change:
    """What a flow wrote on the work copy and verified: its batch, and how to promote it."""

    batch: int
    labels: dict[str, str]  # of the result's snapshot (a clone's gets `source-stream` too)
    spark_version: str | None  # recorded in the result's snapshot
    files: Callable[[], list[Put]]  # in place: the batch's files in the copy, what the swap moves in
    pin_reason: str  # in place: why the source snapshot is pinned
    description: str  # in place: what the swap record says it does


@dataclass(frozen=True)
class Promoted:
    """Where the changed state is, and its snapshot."""

    checkpoint: str  # the stream's checkpoint (in place), or the clone's
    snapshot_id: str | None  # None: in place, but its snapshot failed (`snapshot_error`)
    pinned: str | None  # the source snapshot, pinned for a rollback (in place)
    snapshot_error: str | None = None


def _gerund(verb: str) -> str:
    return verb[:-1] + "ing" if verb.endswith("e") else verb + "ing"


def refuse_running(fs: CheckpointFS, stream: str, doing: str = "rescale") -> None:
    """A stream running on the checkpoint, by its heartbeat, its launch, or its own writes
    (what an in-place rescale or edit, `doing`, refuses)."""
    st = launcher.status(fs)
    if st.state in ("running", "starting"):
        why = f" ({st.writer})" if st.writer else ""
        raise StreamRunningError(f"stream {stream} is {st.state} on {fs.location}{why}: stop it before {_gerund(doing)} "
                                 "it in place", hint="stop it (StopStreamOperator, `streamstate stream stop`), or "
                                 f"{doing} a clone with --target")


def check_at_source(fs: CheckpointFS, source: Manifest, doing: str = "rescale") -> None:
    """The checkpoint is still where the source snapshot cut it: its newest offsets and
    commit are batch N, the very files the snapshot holds. Else an in-place rescale (or edit,
    `doing`) would put batch N+1 on top of other history (rewind it, or fork it)."""
    reader = CheckpointReader(fs.fresh())
    offsets, commits = reader.offset_batches(), reader.committed_batches()
    newest = (offsets[-1] if offsets else None, commits[-1] if commits else None)
    n = source.batch_id
    if newest == (n + 1, n):
        raise CheckpointChanged(
            f"checkpoint {fs.location} holds batch {n + 1} planned but not committed (the stream stopped in "
            f"the middle of it): {_gerund(doing)} it at batch {n} would drop that batch's plan, which Spark redoes "
            "as planned for the sinks that record batch ids", hint="stop it with --finish-planned-batch "
            "(StopStreamOperator's finish_planned_batch=True): it runs once more for exactly that batch")
    if newest != (n, n):
        raise CheckpointChanged(
            f"checkpoint {fs.location} is at batch {newest[0]} (committed {newest[1]}), not at batch {n} of "
            f"snapshot {source.snapshot_id}: {_gerund(doing)} it in place from that snapshot would rewind it",
            hint=f"{doing} without --snapshot (a new snapshot of the stopped stream is the source), or restore "
                 "that snapshot first")
    by_path = {e.path: e.sha256 for e in source.files}
    for rel in (f"offsets/{n}", f"commits/{n}"):
        if by_path.get(rel) != hashlib.sha256(fs.read_bytes(rel)).hexdigest():
            raise CheckpointChanged(
                f"{fs.where(rel)} is not the file snapshot {source.snapshot_id} holds: the checkpoint was changed "
                "since it was taken", hint=f"{doing} without --snapshot (a new snapshot is the source)")


def remove_work_copy(work: CheckpointFS) -> None:
    try:
        if work.exists():
            work.delete_all()
    except (StreamstateError, OSError) as exc:
        log.warning("could not remove the work copy %s: %s", work.location, exc)


class WorkCopy:
    """One change of `stream`'s state on a work copy at `work`: in place (`target` None: the
    stream must be stopped) or as a clone at `target` (named `clone_name`, default
    `<stream>-<done>`). `doing`/`done` (`rescale`/`rescaled`, `edit`/`edited`) name it in
    refusals, crash points, the swap record, the log and the `seconds` it times."""

    def __init__(self, doing: str, done: str, store: SnapshotStore, stream: str, checkpoint: str, fs: CheckpointFS,
                 *, work: str, target: str | None, clone_name: str | None, connection: Any, parallelism: int,
                 started: float) -> None:
        self.doing, self.done = doing, done
        self.store, self.stream, self.checkpoint, self.fs = store, stream, checkpoint, fs
        self.work, self.in_place, self.connection, self.parallelism = work, target is None, connection, parallelism
        self.clone_name = clone_name or f"{stream}-{done}"
        self.started = started  # what `seconds` are counted from
        self.seconds: dict[str, float] = {}
        self.log = logging.getLogger(f"streamstate.{doing}")
        self.restored_versions: dict[str, tuple[int, str]] = {}  # the copy's files once restored
        self._work_fs: CheckpointFS | None = None
        self._source: Manifest | None = None
        self._change: Change | None = None
        self._promoted: Promoted | None = None

    @classmethod
    def open(cls, doing: str, done: str, store: SnapshotStore, stream: str, checkpoint: str, *, work: str,
             target: str | None, clone_name: str | None, connection: Any, parallelism: int,
             fs: CheckpointFS | None = None) -> WorkCopy:
        """Step 1: refuse what cannot be changed, after finishing a crashed swap (in place).
        `fs`: the checkpoint as the caller opened it with `connection`, else opened here."""
        started = time.monotonic()
        fs = fs if fs is not None else open_checkpoint_fs(checkpoint, connection=connection)
        if target is None:
            recover_swap(fs)  # a crashed swap of this checkpoint is finished first (it changes nothing else)
            refuse_running(fs, stream, doing)
        elif target and target.rstrip("/") == checkpoint.rstrip("/"):
            raise UsageError("the clone's target is the stream's own checkpoint", hint=f"{doing} in place instead")
        return cls(doing, done, store, stream, checkpoint, fs, work=work, target=target, clone_name=clone_name,
                   connection=connection, parallelism=parallelism, started=started)

    def source(self, snapshot: str | None,
               check_stopped: Callable[[CheckpointReader, str | None], object] | None = None) -> Manifest:
        """The snapshot `snapshot` names, else a new one of the stopped stream (once
        `check_stopped`, given the checkpoint and its heartbeat's Spark version, refuses nothing)."""
        if snapshot is not None:
            return resolve_snapshot(self.store, self.stream, snapshot)
        reader = CheckpointReader(self.fs)
        beat = read_heartbeat(reader.fs)
        spark_version = beat.spark_version if beat is not None else None
        if check_stopped is not None:
            check_stopped(reader, spark_version)
        source = create_snapshot(self.fs, self.store, self.stream, parallelism=self.parallelism,
                                 spark_version=spark_version).manifest
        self.seconds["snapshot"] = time.monotonic() - self.started
        return source

    def check_at_source(self, source: Manifest) -> None:
        """In place: the checkpoint is still at the source's batch (`check_at_source`)."""
        if self.in_place:
            check_at_source(self.fs, source, self.doing)

    @contextmanager
    def restored(self, source: Manifest) -> Iterator[CheckpointFS]:
        """Step 3: the work copy holding `source` (its files as restored in
        `restored_versions`); it is removed when anything inside fails, `promote` included
        (in place, when the restore fails too; a clone's target only once it was written)."""
        self._source = source
        work_fs = self.fs.relocated(self.work) if self.in_place else open_checkpoint_fs(
            self.work, connection=self.connection)
        self._work_fs = work_fs
        created = False  # a target the user gave is removed only once this call has written it
        if self.in_place:
            remove_work_copy(work_fs)  # what a crashed change left (a swap that needed it was finished above)
        try:
            t = time.monotonic()
            restore_snapshot(self.store, self.stream, source.snapshot_id, work_fs, new_query_id=not self.in_place,
                             parallelism=self.parallelism)
            created = True
            self.restored_versions = work_fs.versions()
            self.seconds["restore"] = time.monotonic() - t
            crash_point(f"{self.doing}.restored")
            yield work_fs
        except BaseException:
            if created or self.in_place:  # a copy that did not verify, or that the swap refused, is not left behind
                remove_work_copy(work_fs)
            raise

    def promote(self, change: Change) -> None:
        """Step 4, inside `restored`: the verified change swapped in (in place, the source
        pinned first and unpinned when the swap refuses), or the clone snapshotted."""
        assert self._work_fs is not None and self._source is not None, "promote() belongs inside restored()"
        work_fs, source = self._work_fs, self._source
        self._change = change
        crash_point(f"{self.doing}.verified")
        t = time.monotonic()
        if not self.in_place:
            self._promoted = Promoted(self.work, create_snapshot(
                work_fs, self.store, self.clone_name, batch_id=change.batch,
                labels={**change.labels, "source-stream": self.stream}, parallelism=self.parallelism,
                spark_version=change.spark_version, always=True).manifest.snapshot_id, None)
            self.seconds[f"snapshot_{self.done}"] = time.monotonic() - t
            return
        puts = change.files()
        pinned = source.snapshot_id if pin_snapshot(self.store, self.stream, source.snapshot_id,
                                                    reason=change.pin_reason) else None
        try:
            self._swap(work_fs, source, puts, change.description)
        except BaseException:
            if pinned is not None:  # nothing changed: the pin has nothing to roll back to
                unpin_snapshot(self.store, self.stream, pinned)
            raise
        self._promoted = Promoted(self.checkpoint, None, source.snapshot_id)
        self.seconds["swap"] = time.monotonic() - t
        crash_point(f"{self.doing}.swapped")

    def finish(self) -> Promoted:
        """Step 5, after `restored`: in place, the work copy removed and the changed
        checkpoint snapshotted (its failure recorded, not raised); as a clone, the clone."""
        assert self._promoted is not None and self._change is not None and self._work_fs is not None, \
            "promote() comes first"
        if not self.in_place:
            return self._promoted
        change = self._change
        # The change is in place: its snapshot, and the work copy's removal, can only fail to
        # happen now, never undo it (the scheduled snapshot DAG takes one anyway).
        remove_work_copy(self._work_fs)
        t = time.monotonic()
        snapshot_id, snapshot_error = None, None
        try:
            snapshot_id = create_snapshot(self.fs, self.store, self.stream, batch_id=change.batch, labels=change.labels,
                                          parallelism=self.parallelism, spark_version=change.spark_version,
                                          always=True).manifest.snapshot_id
        except StreamstateError as exc:
            snapshot_error = exc.one_line()
            self.log.warning("%s is %s in place, but its snapshot failed: %s", self.stream, self.done, snapshot_error)
        self.seconds[f"snapshot_{self.done}"] = time.monotonic() - t
        return Promoted(self.checkpoint, snapshot_id, self._promoted.pinned, snapshot_error)

    def _swap(self, work: CheckpointFS, source: Manifest, puts: list[Put], description: str) -> None:
        """The new batch into the checkpoint, behind a fence, while nothing runs on it and it
        is still at the source's batch (checked before the fence and again after it)."""
        fs = self.fs
        metadata = fs.read_record("metadata")

        def still_stopped_at_source() -> None:
            refuse_running(fs, self.stream, self.doing)
            check_at_source(fs, source, self.doing)

        record = new_record(self.doing, description, work, puts, (), metadata=metadata, metadata_before=metadata)
        apply_swap(fs, work, record, check=still_stopped_at_source)
