"""Rescale a stateful stream: its state spread over another number of partitions, from a
snapshot, verified key by key, and only then put in place.

A Spark stream's state partitions are fixed at its first batch (`spark.sql.shuffle.partitions`
pinned in the checkpoint); executors beyond that number idle. Spark 4.2+ can repartition a
stopped checkpoint offline (`spark._streamingCheckpointManager.repartition`: a new batch N+1
holding batch N's state in N' partitions; the stream's stateless shuffles follow, since the
number is the checkpoint's pinned `spark.sql.shuffle.partitions`), in place, unverified and
with no way back; it refuses HDFS-backed state only after writing the batch's offsets,
which leaves the checkpoint unstartable. `rescale_stream` composes it safely:

1. Refuse what cannot work, before anything is written: fewer than one partition, the
   number the state has already, a running stream (in place: a heartbeat, or a query not
   started by streamstate whose writes show, `liveness.unmanaged_writer`), HDFS-backed
   state, a checkpoint without operator metadata (begun before Spark 4.0 and never run on
   4.x), a stream whose recorded Spark is older than 4.2, and (in place) a source snapshot
   that is not the checkpoint's newest batch: the rescale would rewind it.
2. The source: the given snapshot, else a new one of the (stopped) stream.
3. Restore it to a work copy (in place: a sibling of the checkpoint; as a clone: the
   target) and run the repartition there as a Spark application through the stream's own
   Spark and cluster manager (jobs/rescale_job.py, engine/streams/applications.py). The
   source is read once and the state written once: the repartition batch's files are what
   goes into production.
4. Verify the copy: a digest of every operator's state at batch N and at N+1
   (engine/lookup/digest.py): the same entries, byte for byte, in every store and column
   family, each key of N+1 in the partition Spark will look for it in. The repartition job
   computes both on its executors, one task per store partition and batch, with the
   engine's own decoders (not Spark's reader or writer), and records them beside the copy;
   they are compared again here. Only when the job could not compute them (executors
   without lz4/xxhash or this package) are they computed here, without Spark.
5. In place: pin the source snapshot (rollback is one restore of it), then swap the
   repartition batch into the stopped stream's checkpoint (engine/checkpoint/swap.py): its
   new files are moved in (renamed on a local disk and HDFS, copied server-side on S3)
   behind a fence, with its offsets and commit created only if absent; the checkpoint must
   still be at batch N with no query on it, checked before the fence goes up and after, so a
   query that ran meanwhile (started by anyone) makes it refuse with nothing changed. The
   checkpoint's records (`_streamstate/`) are not touched. Only then is the rescaled state
   snapshotted (labelled `rescaled-from=<source>`, `partitions=<a>-><b>`): `latest` never
   names state production does not have. As a clone: the target is the clone (a new query
   id), snapshotted under the clone's name.

What a crash leaves: before the swap, the production checkpoint untouched and at most a
work copy (the next rescale replaces it); during it, a fenced checkpoint every Spark refuses
to start, which `streamstate stream recover` (or the next restore or rescale) finishes from
the work copy; after it, the rescaled checkpoint, and at worst no snapshot of it yet.
Watermark and timers travel with the state: the repartition batch keeps batch N's
watermark, and timers are state entries like any other (checked by the digest). Pure
Python: the repartition itself runs in the stream's Spark, submitted with `command` (see
`rescale_job_application`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot, unpin_snapshot
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import (
    CheckpointFS,
    open_checkpoint_fs,
    streamstate_home,
)
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import SIDECAR_DIR
from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.checkpoint.reader import (
    HDFS_PROVIDER,
    PROVIDER_CONF,
    CheckpointReader,
    state_partitions,
)
from airflow_provider_streamstate.engine.checkpoint.repartition import (
    RepartitionRecord,
    Verification,
    read_repartition_record,
    repartition_at,
)
from airflow_provider_streamstate.engine.checkpoint.swap import Put, apply_swap, new_record, recover_swap
from airflow_provider_streamstate.engine.core.crash_points import crash_point
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    StreamRunningError,
    StreamstateError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, repartition_problems, state_digest
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.applications import run_to_end
from airflow_provider_streamstate.engine.streams.driver_logs import prune_logs
from airflow_provider_streamstate.engine.streams.submission import Submission

log = logging.getLogger("streamstate.rescale")

MIN_SPARK = (4, 2)  # the first Spark with an offline state repartition
WORK_SUFFIX = ".streamstate-rescale"
LABEL_FROM = "rescaled-from"
LABEL_PARTITIONS = "partitions"

# The spark-submit command (and its environment) that runs jobs/rescale_job.py with the
# given arguments through the stream's Spark: built by the caller (the Airflow layer from
# the stream's spec and connection, the CLI from its spec), as for state jobs.
CommandFor = Callable[[Sequence[str]], tuple[Sequence[str], Mapping[str, str]]]


class RescaleError(StreamstateError):
    """The repartition failed or its result did not verify; nothing was put in place."""


def rescale_job_application() -> str:
    """The path of the application spark-submit runs for a repartition."""
    return str(Path(__file__).resolve().parents[2] / "jobs" / "rescale_job.py")


def rescale_job_arguments(location: str, partitions: int) -> list[str]:
    return [location, str(partitions)]


@dataclass(frozen=True)
class RescaleResult:
    stream: str
    source_snapshot: str
    rescaled_snapshot: str | None  # None: in place, but its snapshot failed (`snapshot_error`)
    from_partitions: int
    to_partitions: int
    repartition_batch: int
    checkpoint: str  # where the rescaled state is now: the stream's checkpoint, or the clone
    in_place: bool
    pinned: str | None  # the source snapshot, pinned for a rollback (in place)
    spark_version: str | None
    stores: list[dict[str, Any]]  # the verified digest, per operator and store
    seconds: dict[str, float] = field(default_factory=dict)
    snapshot_error: str | None = None  # why the rescaled state in place has no snapshot yet

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "source_snapshot": self.source_snapshot,
                "rescaled_snapshot": self.rescaled_snapshot, "from_partitions": self.from_partitions,
                "to_partitions": self.to_partitions, "repartition_batch": self.repartition_batch,
                "checkpoint": self.checkpoint, "in_place": self.in_place, "pinned": self.pinned,
                "spark_version": self.spark_version, "stores": self.stores,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}, "snapshot_error": self.snapshot_error}


def _spark_line(version: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (version or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _refuse_state(where: str, conf: Mapping[str, str], operators: Sequence[tuple[int, bool]], partitions: int,
                  spark_version: str | None) -> int:
    """The state's current number of partitions, once nothing refuses the rescale.
    `operators`: (operator id, has operator metadata)."""
    if not operators:
        raise UsageError(f"{where} holds no state (a stateless query): there is nothing to repartition",
                         hint="scale a stateless stream by giving it more executors")
    if conf.get(PROVIDER_CONF, HDFS_PROVIDER) == HDFS_PROVIDER:
        raise UnsupportedCheckpointError(
            f"{where} keeps HDFS-backed state: Spark's offline repartition supports RocksDB state only "
            "(STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER)",
            hint="a stream keeps its state store provider for life; only RocksDB-backed streams can be rescaled")
    bare = [op for op, has_metadata in operators if not has_metadata]
    if bare:
        raise UnsupportedCheckpointError(
            f"operator {bare[0]} of {where} has no operator metadata: the checkpoint was begun before Spark 4.0, "
            "and Spark's repartition needs it (STATE_REWRITER_INVALID_CHECKPOINT.MISSING_OPERATOR_METADATA)",
            hint="run the stream for one batch on Spark 4.2 or later, which writes it, then rescale")
    line = _spark_line(spark_version)
    if line is not None and line < MIN_SPARK:
        raise UnsupportedCheckpointError(
            f"the stream runs Spark {spark_version}, which cannot repartition state (offline repartition came "
            f"in Spark {MIN_SPARK[0]}.{MIN_SPARK[1]}), and could not read a checkpoint repartitioned by a newer Spark",
            hint="upgrade the stream to Spark 4.2 or later first")
    current = state_partitions(dict(conf))
    if current is None:
        raise UnsupportedCheckpointError(f"{where} pins no number of state partitions (spark.sql.shuffle.partitions)")
    if partitions < 1:
        raise UsageError(f"cannot rescale to {partitions} partitions", hint="give 1 or more")
    if partitions == current:
        raise UsageError(f"{where} has {current} state partitions already",
                         hint=f"give a number other than {current}")
    return current


def _check_checkpoint(reader: CheckpointReader, partitions: int, spark_version: str | None) -> int:
    batch = reader.resolve_batch(None)
    meta, _ = reader.offsets(batch)
    conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}
    fs = reader.fs
    ops = sorted(int(p) for p in fs.listdir("state") if p.isdigit()) if fs.is_dir("state") else []
    has = [(op, fs.is_dir(f"state/{op}/_metadata/v2") or fs.stat(f"state/{op}/_metadata/metadata") is not None)
           for op in ops]
    return _refuse_state(f"checkpoint {reader.where} at batch {batch}", conf, has, partitions, spark_version)


def _check_manifest(m: Manifest, partitions: int) -> int:
    paths = {f.path for f in m.files}
    has = [(op.operator_id, f"state/{op.operator_id}/_metadata/metadata" in paths
            or any(p.startswith(f"state/{op.operator_id}/_metadata/v2/") for p in paths)) for op in m.operators]
    return _refuse_state(f"snapshot {m.snapshot_id} of {m.stream}", m.spark_conf, has, partitions, m.spark_version)


def work_location(checkpoint: str, partitions: int) -> str:
    """The sibling of the checkpoint where its copy is rescaled (replaced by the next
    rescale when a crash left it)."""
    return f"{checkpoint.rstrip('/')}{WORK_SUFFIX}-{partitions}"


def rescale_stream(
    store: SnapshotStore,
    stream: str,
    checkpoint: str,
    *,
    partitions: int,
    command: CommandFor,
    snapshot: str | None = None,
    target: str | None = None,
    clone_name: str | None = None,
    connection: Any = None,
    parallelism: int = 8,
    timeout_s: float | None = None,
    on_submit: Callable[[Any], None] | None = None,
) -> RescaleResult:
    """Rescale the state of `stream` (checkpoint `checkpoint`) to `partitions` partitions;
    see the module docstring. In place (`target` None: the stream must be stopped) or as a
    clone at `target` (named `clone_name` in the store, default `<stream>-rescaled`).
    `snapshot`: the source (an id, `latest`, `latest-good:<suite>`); default a new snapshot
    of the stopped stream. Remote checkpoints are read and written through `connection`."""
    started = time.monotonic()
    seconds: dict[str, float] = {}
    in_place = target is None
    fs = open_checkpoint_fs(checkpoint, connection=connection)
    if in_place:
        recover_swap(fs)  # a crashed swap of this checkpoint is finished first (it changes nothing else)
        refuse_running(fs, stream)
    elif target and target.rstrip("/") == checkpoint.rstrip("/"):
        raise UsageError("the clone's target is the stream's own checkpoint", hint="rescale in place instead")
    if snapshot is None:
        reader = CheckpointReader(fs)
        beat = read_heartbeat(reader.fs)
        beat_version = beat.spark_version if beat is not None else None
        _check_checkpoint(reader, partitions, beat_version)
        source = create_snapshot(fs, store, stream, parallelism=parallelism, spark_version=beat_version).manifest
        seconds["snapshot"] = time.monotonic() - started
    else:
        source = resolve_snapshot(store, stream, snapshot)
    before = _check_manifest(source, partitions)
    if in_place:
        check_at_source(fs, source)
    work = target or work_location(checkpoint, partitions)
    work_fs = fs.relocated(work) if in_place else open_checkpoint_fs(work, connection=connection)
    created = False  # a target the user gave is removed only once this call has written it
    log.info("rescaling %s from %d to %d state partitions: snapshot %s (batch %d) into %s", stream, before,
             partitions, source.snapshot_id, source.batch_id, work)
    if in_place:
        remove_work_copy(work_fs)  # what a crashed rescale left (a swap that needed it was finished above)
    try:
        t = time.monotonic()
        restore_snapshot(store, stream, source.snapshot_id, work_fs, new_query_id=not in_place,
                         parallelism=parallelism)
        created = True
        restored = work_fs.versions()
        seconds["restore"] = time.monotonic() - t
        crash_point("rescale.restored")
        t = time.monotonic()
        record = _repartition(stream, work_fs, partitions, command, timeout_s, on_submit)
        seconds["repartition"] = time.monotonic() - t
        crash_point("rescale.repartitioned")
        t = time.monotonic()
        batch, digest = _verify(work_fs, source.batch_id, before, partitions, record, connection)
        seconds["verify"] = time.monotonic() - t
        if record is not None and record.verification is not None:
            seconds.update({f"verify_{k}": v for k, v in record.verification.seconds.items()})
        spark_version = (record.spark_version if record is not None else None) or source.spark_version
        labels = {LABEL_FROM: source.snapshot_id, LABEL_PARTITIONS: f"{before}->{partitions}"}
        pinned = None
        crash_point("rescale.verified")
        if in_place:
            t = time.monotonic()
            puts = _repartition_batch_files(work_fs, restored, batch)
            pinned = source.snapshot_id if pin_snapshot(
                store, stream, source.snapshot_id,
                reason=f"before rescaling {before}->{partitions}: restore it to roll back") else None
            try:
                _swap(fs, work_fs, stream, source, puts, batch, f"{before}->{partitions}")
            except BaseException:
                if pinned is not None:  # nothing changed: the pin has nothing to roll back to
                    unpin_snapshot(store, stream, pinned)
                raise
            pinned = source.snapshot_id
            seconds["swap"] = time.monotonic() - t
            crash_point("rescale.swapped")
        else:
            labels["source-stream"] = stream
            t = time.monotonic()
            rescaled_id: str | None = create_snapshot(
                work_fs, store, clone_name or f"{stream}-rescaled", batch_id=batch, labels=labels,
                parallelism=parallelism, spark_version=spark_version, always=True).manifest.snapshot_id
            seconds["snapshot_rescaled"] = time.monotonic() - t
    except BaseException:
        if created or in_place:  # a copy that did not verify, or that the swap refused, is not left behind
            remove_work_copy(work_fs)
        raise
    snapshot_error = None
    if in_place:
        # The rescaled state is in place: its snapshot, and the work copy's removal, can only
        # fail to happen now, never undo it (the scheduled snapshot DAG takes one anyway).
        remove_work_copy(work_fs)
        t = time.monotonic()
        try:
            rescaled_id = create_snapshot(fs, store, stream, batch_id=batch, labels=labels, parallelism=parallelism,
                                          spark_version=spark_version, always=True).manifest.snapshot_id
        except StreamstateError as exc:
            rescaled_id, snapshot_error = None, exc.one_line()
            log.warning("%s is rescaled in place, but its snapshot failed: %s", stream, snapshot_error)
        seconds["snapshot_rescaled"] = time.monotonic() - t
    seconds["total"] = time.monotonic() - started
    log.info("rescaled %s: %d -> %d partitions, snapshot %s (%s)", stream, before, partitions, rescaled_id,
             "in place" if in_place else f"clone at {work}")
    return RescaleResult(stream, source.snapshot_id, rescaled_id, before, partitions, batch,
                         checkpoint if in_place else work, in_place, pinned, spark_version,
                         [s.to_json() for s in digest.stores], seconds, snapshot_error)


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


def _repartition_batch_files(work: CheckpointFS, restored: dict[str, tuple[int, str]], batch: int) -> list[Put]:
    """What the repartition wrote into the work copy (new or changed since the restore, the
    copy's own records aside): the files a swap moves into production. Its offsets and
    commit are created only if absent (a query writing that batch meanwhile wins, and the
    swap refuses)."""
    exclusive = {f"offsets/{batch}", f"commits/{batch}"}
    now = work.versions()
    return [Put(rel, size, exclusive=rel in exclusive) for rel, (size, token) in sorted(now.items())
            if restored.get(rel) != (size, token) and not rel.startswith(SIDECAR_DIR + "/")]


def _swap(fs: CheckpointFS, work: CheckpointFS, stream: str, source: Manifest, puts: list[Put], batch: int,
          change: str) -> None:
    """The repartition batch into the checkpoint, behind a fence, while nothing runs on it
    and it is still at the source's batch (checked before the fence and again after it)."""
    metadata = fs.read_record("metadata")

    def still_stopped_at_source() -> None:
        refuse_running(fs, stream)
        check_at_source(fs, source)

    record = new_record("rescale", f"rescale {change} of {stream}: batch {batch} on batch {source.batch_id}", work,
                        puts, (), metadata=metadata, metadata_before=metadata)
    apply_swap(fs, work, record, check=still_stopped_at_source)


def _repartition(stream: str, work: CheckpointFS, partitions: int, command: CommandFor, timeout_s: float | None,
                 on_submit: Callable[[Any], None] | None) -> RepartitionRecord | None:
    """Run the repartition job on the work copy through the stream's Spark; what it recorded
    (None without a record: the copy's own batches say whether it repartitioned)."""
    argv, env = command(rescale_job_arguments(work.shared_location, partitions))
    logs = streamstate_home() / "rescale"
    logs.mkdir(parents=True, exist_ok=True)
    prune_logs(logs)
    job_id = f"{stream}-{partitions}-{uuid.uuid4().hex[:8]}"
    submission = Submission.prepare(list(argv), env={**os.environ, **env}, log_path=logs / f"{job_id}.log",
                                    name=f"streamstate-rescale-{stream}", launch_id=job_id, secret_env=env)
    app = run_to_end(submission, f"the repartition of {stream} to {partitions} partitions", timeout_s=timeout_s,
                     on_submit=on_submit)
    record = None
    try:
        record = read_repartition_record(work)
    except (StreamstateError, OSError) as exc:  # the checkpoint itself says whether it repartitioned
        log.warning("the repartition job's record is unreadable: %s", exc)
    code = app.proc.returncode if app.proc is not None else None
    if record is not None:  # the job's own word on Spark's repartition (its verification is _verify's)
        failed = not record.ok
    else:
        failed = (code not in (0, None) and app.report is None) or (
            app.report is not None and app.report.stream_state() != "stopped")
    if failed:
        error = (record.error if record is not None else None) or app.last_error()
        if (record is not None and record.unsupported) or code == 3:
            raise UnsupportedCheckpointError(f"{error}; the stream's Spark cannot rescale it",
                                             hint="run the stream on Spark 4.2 or later")
        raise RescaleError(f"Spark's repartition failed: {error}", hint=f"nothing was changed; its log: {app.log_path}")
    return record


def _verify(work: CheckpointFS, batch: int, before: int, partitions: int, record: RepartitionRecord | None,
            connection: Any) -> tuple[int, StateDigest]:
    """The repartition batch, and the copy's digest there, once it holds batch `batch`'s
    entries, each key in the partition Spark looks for it in. The digests are the ones the
    repartition job computed on its executors (`record`), compared here again; computed here
    only when the job could not (its executors lack what the digest needs, an older job)."""
    location = work.location
    # A fresh view of the copy: `work` listed it (S3, HDFS cache listings) before the job wrote its batch.
    done = repartition_at(CheckpointReader(work.relocated(location)), batch + 1)
    if done is None or not done.committed or done.to_partitions != partitions:
        raise RescaleError(f"the copy at {location} holds no committed repartition to {partitions} partitions "
                           f"after batch {batch}", hint="nothing was changed; retry the rescale")
    checked = record.verification if record is not None else None
    digests = _recorded_digests(checked)
    if checked is not None and digests is not None:
        old, new = digests
        where = f"by {checked.tasks} Spark tasks on {checked.executors} executor(s)"
    else:
        why = "the repartition job recorded no verification" if checked is None else \
            checked.problems[0] if checked.problems else "the repartition job's digests are unreadable"
        log.warning("%s: verifying the copy here instead (%s)", why, location)
        old = state_digest(location, batch, connection=connection, placement=False)
        new = state_digest(location, batch + 1, connection=connection)
        where = "here"
    problems = repartition_problems(old, new, partitions)
    if old.batch_id != batch:
        problems.insert(0, f"the digest before is of batch {old.batch_id}, not of the snapshot's batch {batch}")
    if problems:
        raise CorruptionError(f"the repartitioned copy does not hold the snapshot's state: {problems[0]}"
                              + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                              hint="nothing was put in place; report it with the copy's location, " + location)
    log.info("verified %s %s: %d entries in %d stores moved %d -> %d partitions, none lost, added or misplaced",
             location, where, sum(s.entries for s in new.stores), len(new.stores), before, partitions)
    return done.batch_id, new


def _recorded_digests(checked: Verification | None) -> tuple[StateDigest, StateDigest] | None:
    if checked is None or checked.before is None or checked.after is None:
        return None
    try:
        return StateDigest.from_json(checked.before), StateDigest.from_json(checked.after)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def remove_work_copy(work: CheckpointFS) -> None:
    try:
        if work.exists():
            work.delete_all()
    except (StreamstateError, OSError) as exc:
        log.warning("could not remove the work copy %s: %s", work.location, exc)
