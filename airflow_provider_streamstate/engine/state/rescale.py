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
   number the state has already, a running stream (in place), HDFS-backed state, a
   checkpoint without operator metadata (begun before Spark 4.0 and never run on 4.x), a
   stream whose recorded Spark is older than 4.2.
2. The source: the given snapshot, else a new one of the (stopped) stream.
3. Restore it to a work copy (in place: a sibling of the checkpoint; as a clone: the
   target), run the repartition there as a Spark application through the stream's own
   Spark and cluster manager (jobs/rescale_job.py, engine/streams/applications.py).
4. Verify the copy: a digest of every operator's state at batch N and at N+1 without Spark
   (engine/lookup/digest.py): the same entries, byte for byte, in every store and column
   family, each key in the partition Spark will look for it in.
5. Snapshot the copy, labelled `rescaled-from=<source>` and `partitions=<a>-><b>`.
6. In place: pin the source snapshot (rollback is one restore of it), restore the rescaled
   snapshot onto the stopped stream's checkpoint (the restore's atomic swap), remove the
   work copy. As a clone: the target is the clone (a new query id).

The production checkpoint is untouched until the last step, and that step is a restore,
which leaves it exactly as it was when it fails: a crash anywhere before leaves at most a
work copy, which the next rescale replaces. Watermark and timers travel with the state:
the repartition batch keeps batch N's watermark, and timers are state entries like any
other (checked by the digest). Pure Python: the repartition itself runs in the stream's
Spark, submitted with `command` (see `rescale_job_application`).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs, streamstate_home
from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.checkpoint.reader import (
    HDFS_PROVIDER,
    PROVIDER_CONF,
    CheckpointReader,
    state_partitions,
)
from airflow_provider_streamstate.engine.checkpoint.repartition import REPARTITION_RECORD, repartition_at
from airflow_provider_streamstate.engine.core.errors import (
    CorruptionError,
    StreamRunningError,
    StreamstateError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, state_digest
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
    rescaled_snapshot: str
    from_partitions: int
    to_partitions: int
    repartition_batch: int
    checkpoint: str  # where the rescaled state is now: the stream's checkpoint, or the clone
    in_place: bool
    pinned: str | None  # the source snapshot, pinned for a rollback (in place)
    spark_version: str | None
    stores: list[dict[str, Any]]  # the verified digest, per operator and store
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "source_snapshot": self.source_snapshot,
                "rescaled_snapshot": self.rescaled_snapshot, "from_partitions": self.from_partitions,
                "to_partitions": self.to_partitions, "repartition_batch": self.repartition_batch,
                "checkpoint": self.checkpoint, "in_place": self.in_place, "pinned": self.pinned,
                "spark_version": self.spark_version, "stores": self.stores,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


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
    if in_place:
        st = launcher.status(open_checkpoint_fs(checkpoint, connection=connection))
        if st.state in ("running", "starting"):
            raise StreamRunningError(f"stream {stream} is {st.state} on {checkpoint}: stop it before rescaling it in "
                                     "place", hint="stop it (StopStreamOperator, `streamstate stream stop`), or "
                                     "rescale a clone with --target")
    elif target and target.rstrip("/") == checkpoint.rstrip("/"):
        raise UsageError("the clone's target is the stream's own checkpoint", hint="rescale in place instead")
    beat_version = None
    if snapshot is None:
        reader = CheckpointReader(checkpoint, connection=connection)
        beat = read_heartbeat(reader.fs)
        beat_version = beat.spark_version if beat is not None else None
        _check_checkpoint(reader, partitions, beat_version)
        source = create_snapshot(checkpoint, store, stream, parallelism=parallelism, checkpoint_connection=connection,
                                 spark_version=beat_version).manifest
        seconds["snapshot"] = time.monotonic() - started
    else:
        source = resolve_snapshot(store, stream, snapshot)
    before = _check_manifest(source, partitions)
    work = target or work_location(checkpoint, partitions)
    created = False  # a target the user gave is removed only once this call has written it
    log.info("rescaling %s from %d to %d state partitions: snapshot %s (batch %d) into %s", stream, before,
             partitions, source.snapshot_id, source.batch_id, work)
    try:
        t = time.monotonic()
        restore_snapshot(store, stream, source.snapshot_id, work, force=in_place, connection=connection,
                         new_query_id=not in_place, parallelism=parallelism)
        created = True
        seconds["restore"] = time.monotonic() - t
        t = time.monotonic()
        spark_version = _repartition(stream, work, partitions, command, timeout_s, on_submit, connection)
        seconds["repartition"] = time.monotonic() - t
        t = time.monotonic()
        batch, digest = _verify(work, source.batch_id, before, partitions, connection)
        seconds["verify"] = time.monotonic() - t
        t = time.monotonic()
        name = stream if in_place else (clone_name or f"{stream}-rescaled")
        labels = {LABEL_FROM: source.snapshot_id, LABEL_PARTITIONS: f"{before}->{partitions}"}
        if not in_place:
            labels["source-stream"] = stream
        rescaled = create_snapshot(work, store, name, labels=labels, parallelism=parallelism,
                                   checkpoint_connection=connection, spark_version=spark_version or source.spark_version,
                                   always=True).manifest
        seconds["snapshot_rescaled"] = time.monotonic() - t
    except BaseException:
        if created or in_place:  # a copy that did not verify is not left half made
            _remove(work, connection)
        raise
    pinned = None
    if in_place:
        t = time.monotonic()
        pin_snapshot(store, stream, source.snapshot_id,
                     reason=f"before rescaling {before}->{partitions} ({rescaled.snapshot_id}): restore it to roll back")
        pinned = source.snapshot_id
        restore_snapshot(store, stream, rescaled.snapshot_id, checkpoint, force=True, connection=connection,
                         parallelism=parallelism)
        _remove(work, connection)
        seconds["swap"] = time.monotonic() - t
    seconds["total"] = time.monotonic() - started
    log.info("rescaled %s: %d -> %d partitions, snapshot %s (%s)", stream, before, partitions,
             rescaled.snapshot_id, "in place" if in_place else f"clone at {work}")
    return RescaleResult(stream, source.snapshot_id, rescaled.snapshot_id, before, partitions, batch,
                         checkpoint if in_place else work, in_place, pinned, spark_version or source.spark_version,
                         [s.to_json() for s in digest.stores], seconds)


def _repartition(stream: str, location: str, partitions: int, command: CommandFor, timeout_s: float | None,
                 on_submit: Callable[[Any], None] | None, connection: Any) -> str | None:
    """Run the repartition job on `location` through the stream's Spark; Spark's version."""
    argv, env = command(rescale_job_arguments(location, partitions))
    logs = streamstate_home() / "rescale"
    logs.mkdir(parents=True, exist_ok=True)
    prune_logs(logs)
    job_id = f"{stream}-{partitions}-{uuid.uuid4().hex[:8]}"
    submission = Submission.prepare(list(argv), env={**os.environ, **env}, log_path=logs / f"{job_id}.log",
                                    name=f"streamstate-rescale-{stream}", launch_id=job_id, secret_env=env)
    app = run_to_end(submission, f"the repartition of {stream} to {partitions} partitions", timeout_s=timeout_s,
                     on_submit=on_submit)
    raw = None
    try:
        raw = open_checkpoint_fs(location, connection=connection).read_record(REPARTITION_RECORD)
    except (StreamstateError, OSError):
        pass
    record = json.loads(raw) if raw else {}
    code = app.proc.returncode if app.proc is not None else None
    failed = record.get("ok") is False or (code not in (0, None) and app.report is None) or (
        app.report is not None and app.report.stream_state() != "stopped")
    if failed:
        error = record.get("error") or app.last_error()
        if record.get("unsupported") or code == 3:
            raise UnsupportedCheckpointError(f"{error}; the stream's Spark cannot rescale it",
                                             hint="run the stream on Spark 4.2 or later")
        raise RescaleError(f"Spark's repartition failed: {error}", hint=f"nothing was changed; its log: {app.log_path}")
    return str(record["spark_version"]) if record.get("spark_version") else None


def _verify(location: str, batch: int, before: int, partitions: int, connection: Any) -> tuple[int, StateDigest]:
    """The repartition batch, and the copy's digest there, once it matches batch `batch`'s."""
    reader = CheckpointReader(location, connection=connection)
    done = repartition_at(reader, batch + 1)
    if done is None or not done.committed or done.to_partitions != partitions:
        raise RescaleError(f"the copy at {location} holds no committed repartition to {partitions} partitions "
                           f"after batch {batch}", hint="nothing was changed; retry the rescale")
    old = state_digest(location, batch, connection=connection)
    new = state_digest(location, batch + 1, connection=connection)
    problems = old.same_entries(new)
    if set(new.partitions.values()) != {partitions}:
        problems.append(f"the repartitioned state has {sorted(set(new.partitions.values()))} partitions, "
                        f"not {partitions}")
    problems += list(new.misplaced)
    if problems:
        raise CorruptionError(f"the repartitioned copy does not hold the snapshot's state: {problems[0]}"
                              + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                              hint="nothing was put in place; report it with the copy's location, " + location)
    log.info("verified %s: %d entries in %d stores moved %d -> %d partitions, none lost, added or misplaced",
             location, sum(s.entries for s in new.stores), len(new.stores), before, partitions)
    return done.batch_id, new


def _remove(location: str, connection: Any) -> None:
    try:
        open_checkpoint_fs(location, connection=connection).delete_all()
    except (StreamstateError, OSError) as exc:
        log.warning("could not remove the work copy %s: %s", location, exc)
