"""State jobs: the questions asked of a snapshot's state (validate, show, export, diff, bisect),
each one request in, one small result out.

The same `run_state_job` answers a request in two places: in the calling process, on a local
Spark session (the embedded default), or inside a Spark application of this package
(jobs/state_job.py) that engine/state/submit.py runs on the user's cluster, where the
snapshot is read from the store's scratch area by the executors. Either way the caller
gets the same JSON result: a validation's record (also stored write-once beside the
snapshot), a diff's counts and samples, an export's location and row count, a state's first
rows: never the state itself.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import (
    CheckpointFS,
    location_scheme,
    open_checkpoint_fs,
)
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.state.reader import StateSelector
from airflow_provider_streamstate.engine.state.scratch import new_job_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_streamstate.engine.state.reader import StateReader
    from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.state")

JOB_KINDS = ("validate", "show", "export", "diff", "bisect", "batch")
EXPORT_FORMATS = ("parquet", "csv", "jsonl")
REQUEST_FORMAT = "streamstate.state-job/v1"
JOBS_KIND = "state-jobs"  # records streams/<stream>/state-jobs/<job id>-{request,result}.json


@dataclass(frozen=True)
class StateJobRequest:
    """One state job: what to read (store, stream, snapshots, which operator) and what to do.

    `suite` is a suite's normalised definition (engine/state/validation.py `Suite.definition`),
    loaded and checked by the caller: a bad suite fails before any application is submitted.
    A `batch` answers its `requests` (other kinds, of any stream in the store) one after the
    other in one Spark application: a pipeline's validation is one application start, not
    one per member; its records live under `stream`.
    `data_docs` and `output` are paths the user names: local to where the job runs, or
    `s3://`/`s3a://` URLs.
    """

    kind: str
    store: str
    stream: str
    job_id: str = ""
    snapshot: str = "latest"
    selector: dict[str, Any] = field(default_factory=dict)
    suite: dict[str, Any] | None = None
    record: bool = True
    data_docs: str | None = None
    where: str | None = None
    limit: int = 20
    sample: int = 5
    fmt: str | None = None
    output: str | None = None
    other_snapshot: str | None = None
    other_stream: str | None = None
    good: str | None = None
    bad: str | None = None
    requests: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.kind not in JOB_KINDS:
            raise UsageError(f"unknown state job {self.kind!r}", hint=f"one of {', '.join(JOB_KINDS)}")
        if self.kind in ("validate", "bisect") and not self.suite:
            raise UsageError(f"a {self.kind} job needs a suite", hint="give the suite (a GX suite JSON file)")
        if self.kind == "diff" and not self.other_snapshot:
            raise UsageError("a diff job needs the snapshot to compare with", hint="give SNAPSHOT_B")
        if self.kind == "export":
            if self.fmt not in EXPORT_FORMATS:
                raise UsageError(f"unknown export format {self.fmt!r}", hint=f"one of {', '.join(EXPORT_FORMATS)}")
            if not self.output:
                raise UsageError("an export needs an output location", hint="give --output (a path or s3a:// URL)")
        if self.limit < 0 or self.sample < 0:
            raise UsageError("limit and sample must be at least 0")
        if self.kind == "batch":
            if not self.requests:
                raise UsageError("a batch of state jobs needs its requests", hint="give one request per job")
            for sub in self.batch():
                if sub.kind == "batch" or sub.store != self.store:
                    raise UsageError("a batch holds state jobs of its own store, not batches",
                                     hint="flatten the batch")
        elif self.requests is not None:
            raise UsageError(f"a {self.kind} job takes no requests", hint="use kind batch")

    def batch(self) -> list[StateJobRequest]:
        """A batch's requests, each carrying the batch's job id (its scratch copies are the batch's)."""
        names = {f.name for f in fields(StateJobRequest)}
        return [StateJobRequest(**{**{k: v for k, v in r.items() if k in names}, "job_id": self.job_id})
                for r in self.requests or []]

    @property
    def state_selector(self) -> StateSelector:
        return StateSelector.from_json(self.selector)

    def with_job_id(self) -> StateJobRequest:
        from dataclasses import replace

        return self if self.job_id else replace(self, job_id=new_job_id(self.kind))

    def to_json(self) -> bytes:
        return json.dumps({"format": REQUEST_FORMAT, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StateJobRequest:
        d = json.loads(data)
        if d.pop("format", None) != REQUEST_FORMAT:
            raise UsageError("not a state job request", hint=f"expected format {REQUEST_FORMAT}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def request_key(stream: str, job_id: str) -> str:
    """`streams/<stream>/state-jobs/<job>-request.json`"""
    from airflow_provider_streamstate.engine.stores.base import record_key

    return record_key(stream, JOBS_KIND, f"{job_id}-request")


def result_key(stream: str, job_id: str) -> str:
    """`streams/<stream>/state-jobs/<job>-result.json`"""
    from airflow_provider_streamstate.engine.stores.base import record_key

    return record_key(stream, JOBS_KIND, f"{job_id}-result")


def job_records_prefix(stream: str) -> str:
    from airflow_provider_streamstate.engine.stores.base import STREAMS_PREFIX

    return f"{STREAMS_PREFIX}/{stream}/{JOBS_KIND}"


# --- running one ----------------------------------------------------------------------------


def run_state_job(request: StateJobRequest, reader: StateReader) -> dict[str, Any]:
    """Answer `request` with `reader` (its store, its Spark session); the JSON result."""
    if request.kind == "batch":
        return {"kind": "batch", "job_id": request.job_id,
                "results": [run_state_job(sub, reader) for sub in request.batch()]}
    handler = {"validate": _validate, "show": _show, "export": _export, "diff": _diff, "bisect": _bisect}
    result = handler[request.kind](request, reader)
    return {"kind": request.kind, "job_id": request.job_id, **result}


def _suite(request: StateJobRequest) -> Any:
    from airflow_provider_streamstate.engine.state.validation import load_suite_value

    return load_suite_value(request.suite, f"the request of {request.job_id or request.kind}")


def _validate(request: StateJobRequest, reader: StateReader) -> dict[str, Any]:
    from airflow_provider_streamstate.engine.state.validation import validate_snapshot

    suite = _suite(request)
    remote = bool(request.data_docs) and location_scheme(str(request.data_docs)) != "file"
    location = str(request.data_docs).rstrip("/") + "/index.html" if remote else None
    with _docs_dir(request.data_docs, reader.store) as docs:
        result = validate_snapshot(reader, request.stream, request.snapshot, suite, selector=request.state_selector,
                                   record=request.record, data_docs=docs, data_docs_location=location)
    out = result.to_json()
    if result.data_docs and location:
        out["data_docs"] = location
    out["summary"] = result.summary()
    out["failures"] = [o.describe() for o in result.record.failed]
    return out


def _show(request: StateJobRequest, reader: StateReader) -> dict[str, Any]:
    m = reader.manifest(request.stream, request.snapshot)
    sel = request.state_selector
    df = filtered(reader.state(request.stream, m.snapshot_id, sel), request.where)
    rows = [json.loads(json.dumps(r.asDict(), default=str)) for r in df.limit(request.limit).collect()]
    total = df.count()
    meta = reader.metadata(request.stream, m.snapshot_id)
    return {"snapshot_id": m.snapshot_id, "stream": m.stream, "batch_id": m.batch_id, "selector": sel.to_json(),
            "where": request.where, "columns": df.columns, "rows": rows, "total_rows": total,
            "metadata": meta.to_json()}


def _export(request: StateJobRequest, reader: StateReader) -> dict[str, Any]:
    assert request.output is not None and request.fmt is not None
    m = reader.manifest(request.stream, request.snapshot)
    df = filtered(reader.state(request.stream, m.snapshot_id, request.state_selector), request.where)
    output = export_state(df, request.fmt, request.output, store=reader.store)
    rows = df.count()
    return {"snapshot_id": m.snapshot_id, "stream": m.stream, "batch_id": m.batch_id, "format": request.fmt,
            "output": output, "rows": rows, "columns": df.columns}


def _diff(request: StateJobRequest, reader: StateReader) -> dict[str, Any]:
    from airflow_provider_streamstate.engine.state.diff import diff_snapshots

    assert request.other_snapshot is not None
    d = diff_snapshots(reader, request.stream, request.snapshot, request.other_snapshot, request.state_selector,
                       b_stream=request.other_stream or None, sample=request.sample)
    return {**d.to_json(), "summary": d.summary()}


def _bisect(request: StateJobRequest, reader: StateReader) -> dict[str, Any]:
    from airflow_provider_streamstate.engine.state.bisect import bisect_snapshots

    result = bisect_snapshots(reader, request.stream, _suite(request), selector=request.state_selector,
                              good=request.good or None, bad=request.bad or None)
    return {**result.to_json(), "summary": result.summary()}


# --- helpers the kinds share ------------------------------------------------------------------


def filtered(df: DataFrame, where: str | None) -> DataFrame:
    """`df` filtered by a Spark SQL condition, checked now: a bad filter fails in one line."""
    if not where:
        return df
    spark_log = logging.getLogger("SQLQueryContextLogger")  # PySpark logs the failure as an ERROR too
    level = spark_log.level
    spark_log.setLevel(logging.CRITICAL)
    try:
        out = df.where(where)
        out.schema  # noqa: B018 - analysis happens here
        return out
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException/ParseException
        first = " ".join(str(exc).split(" SQLSTATE")[0].split())[:300]
        raise UsageError(f"where {where!r} is not a valid filter on the state: {first}",
                         hint=f"columns: {', '.join(df.columns)}") from None
    finally:
        spark_log.setLevel(level)


def _remote(location: str, store: SnapshotStore | None) -> CheckpointFS | None:
    """The filesystem of a remote output location (through the store's connection when it is
    on the store's service), or None for a local path."""
    if location_scheme(location) == "file":
        return None
    return open_checkpoint_fs(location, connection=store.checkpoint_connection(location) if store else None)


def export_state(df: DataFrame, fmt: str, output: str, *, store: SnapshotStore | None = None) -> str:
    """Write `df` to `output`, which must not exist yet: all files or none under that name.

    Locally the files are written beside it and renamed into place. On a remote filesystem
    (`s3a://`, `hdfs://`) the export is Spark's own commit (its `_SUCCESS` marker is written
    last) and a failed one has its files deleted before the error is raised.
    """
    try:
        target = _remote(output, store)
    except UsageError as exc:
        raise UsageError(exc.message.replace("checkpoint", "export output"), hint=exc.hint) from None
    if target is not None:
        location = target.location
        if target.exists():
            raise UsageError(f"export output {output} already exists", hint="give a path that does not exist yet")
        try:
            _write(df, fmt, location)
        except BaseException as exc:
            if "PATH_ALREADY_EXISTS" in str(exc):  # another export got there first: its files, not ours
                raise UsageError(f"export output {output} already exists",
                                 hint="give a path that does not exist yet") from None
            target.delete_all()
            raise
        return location
    path = Path(output.removeprefix("file://")).expanduser().resolve()
    if path.exists():
        raise UsageError(f"export output {path} already exists", hint="give a path that does not exist yet")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent / f".{path.name}.streamstate-export-{uuid.uuid4().hex[:8]}"
    try:
        _write(df, fmt, str(staging))
        os.rename(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(path)


def _write(df: DataFrame, fmt: str, location: str) -> None:
    writer = df.write.mode("errorifexists")
    if fmt == "parquet":
        writer.parquet(location)
    elif fmt == "csv":
        writer.option("header", "true").csv(location)
    else:
        writer.json(location)


@contextmanager
def _docs_dir(location: str | None, store: SnapshotStore | None) -> Iterator[str | None]:
    """Where GX writes Data Docs: the named directory, or, for a remote location (`s3://`,
    `hdfs://`), a temp directory uploaded there once the suite has run."""
    remote = _remote(location, store) if location is not None else None
    if remote is None:
        yield location
        return
    tmp = Path(tempfile.mkdtemp(prefix="streamstate-docs-"))
    try:
        yield str(tmp)
        for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
            kind = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
            remote.write_record(f.relative_to(tmp).as_posix(), f.read_bytes(), content_type=kind)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
