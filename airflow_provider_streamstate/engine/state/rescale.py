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
`rescale_job_application`). Steps 1 (the running stream), 2, 3 (the work copy), 5 and the
removal of a copy that failed are the work-copy transaction a key edit shares
(engine/state/work_copy.py); the repartition and its verification are this module's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import (
    CheckpointFS,
)
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import SIDECAR_DIR
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
from airflow_provider_streamstate.engine.checkpoint.swap import Put
from airflow_provider_streamstate.engine.core.crash_points import crash_point
from airflow_provider_streamstate.engine.core.errors import (
    CorruptionError,
    StreamstateError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, repartition_problems, state_digest
from airflow_provider_streamstate.engine.state.work_copy import Change, WorkCopy
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams.applications import CommandFor, run_job

log = logging.getLogger("streamstate.rescale")

MIN_SPARK = (4, 2)  # the first Spark with an offline state repartition
WORK_SUFFIX = ".streamstate-rescale"
LABEL_FROM = "rescaled-from"
LABEL_PARTITIONS = "partitions"



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
    ship_code: bool | None = None,
) -> RescaleResult:
    """Rescale the state of `stream` (checkpoint `checkpoint`) to `partitions` partitions;
    see the module docstring. In place (`target` None: the stream must be stopped) or as a
    clone at `target` (named `clone_name` in the store, default `<stream>-rescaled`).
    `snapshot`: the source (an id, `latest`, `latest-good:<suite>`); default a new snapshot
    of the stopped stream. Remote checkpoints are read and written through `connection`.
    `ship_code`: whether the repartition job gets this package's code in its py-files
    (engine/streams/package_code.py; None: on a cluster)."""
    copy = WorkCopy.open("rescale", "rescaled", store, stream, checkpoint,
                         work=target or work_location(checkpoint, partitions), target=target,
                         clone_name=clone_name, connection=connection, parallelism=parallelism)
    seconds = copy.seconds
    source = copy.source(snapshot, lambda reader, version: _check_checkpoint(reader, partitions, version))
    before = _check_manifest(source, partitions)
    copy.check_at_source(source)
    log.info("rescaling %s from %d to %d state partitions: snapshot %s (batch %d) into %s", stream, before,
             partitions, source.snapshot_id, source.batch_id, copy.work)
    with copy.restored(source) as work_fs:
        t = time.monotonic()
        record = _repartition(stream, work_fs, partitions, command, timeout_s, on_submit, ship_code)
        seconds["repartition"] = time.monotonic() - t
        crash_point("rescale.repartitioned")
        t = time.monotonic()
        batch, digest = _verify(work_fs, source.batch_id, before, partitions, record, connection)
        seconds["verify"] = time.monotonic() - t
        if record is not None and record.verification is not None:
            seconds.update({f"verify_{k}": v for k, v in record.verification.seconds.items()})
        spark_version = (record.spark_version if record is not None else None) or source.spark_version
        copy.promote(Change(
            batch, {LABEL_FROM: source.snapshot_id, LABEL_PARTITIONS: f"{before}->{partitions}"}, spark_version,
            files=lambda: _repartition_batch_files(work_fs, copy.restored_versions, batch),
            pin_reason=f"before rescaling {before}->{partitions}: restore it to roll back",
            description=f"rescale {before}->{partitions} of {stream}: batch {batch} on batch {source.batch_id}"))
    done = copy.finish()
    seconds["total"] = time.monotonic() - copy.started
    log.info("rescaled %s: %d -> %d partitions, snapshot %s (%s)", stream, before, partitions, done.snapshot_id,
             "in place" if copy.in_place else f"clone at {copy.work}")
    return RescaleResult(stream, source.snapshot_id, done.snapshot_id, before, partitions, batch, done.checkpoint,
                         copy.in_place, done.pinned, spark_version, [s.to_json() for s in digest.stores], seconds,
                         done.snapshot_error)


def _repartition_batch_files(work: CheckpointFS, restored: dict[str, tuple[int, str]], batch: int) -> list[Put]:
    """What the repartition wrote into the work copy (new or changed since the restore, the
    copy's own records aside): the files a swap moves into production. Its offsets and
    commit are created only if absent (a query writing that batch meanwhile wins, and the
    swap refuses)."""
    exclusive = {f"offsets/{batch}", f"commits/{batch}"}
    now = work.versions()
    return [Put(rel, size, exclusive=rel in exclusive) for rel, (size, token) in sorted(now.items())
            if restored.get(rel) != (size, token) and not rel.startswith(SIDECAR_DIR + "/")]


def _repartition(stream: str, work: CheckpointFS, partitions: int, command: CommandFor, timeout_s: float | None,
                 on_submit: Callable[[Any], None] | None, ship_code: bool | None) -> RepartitionRecord | None:
    """Run the repartition job on the work copy through the stream's Spark; what it recorded
    (None without a record: the copy's own batches say whether it repartitioned)."""
    app = run_job(command, rescale_job_arguments(work.shared_location, partitions), logs="rescale",
                  job_id=f"{stream}-{partitions}-{uuid.uuid4().hex[:8]}", name=f"streamstate-rescale-{stream}",
                  what=f"the repartition of {stream} to {partitions} partitions", timeout_s=timeout_s,
                  on_submit=on_submit, ship_code=ship_code, checkpoints=[work])
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
        old = state_digest(work, batch, connection=connection, placement=False)  # each a fresh view of `work`
        new = state_digest(work, batch + 1, connection=connection)
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
