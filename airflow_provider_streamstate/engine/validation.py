"""Validating a snapshot's state with a Great Expectations suite, and the record it leaves.

A suite (GX Core 1.x's own JSON form, `{"name", "expectations": [{"type", "kwargs"}]}`, or
a Python callable returning an `ExpectationSuite`) runs on one operator's flattened state
(engine/state.py) through GX's Spark dataframe datasource in an ephemeral context. The
result is stored write-once beside the immutable manifest:

    streams/<stream>/validations/<snapshot id>/<suite name>.json

holding at least `snapshot_id`, `suite`, `success` and `validated_at` (ISO UTC) — the
retention and replication workers rely on this layout. A snapshot that passed a suite is
*known-good* for it (`latest-good:<suite>` in catalog.resolve_snapshot). A record is
never overwritten: validating again reuses it, and a changed suite under the same name is
refused (give it a new name). Records are untrusted input when read back
(`ValidationRecord.from_json` checks every field, like manifest.py).

great_expectations is imported only inside the functions that run it (8-13 s to import).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.errors import NotFoundError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.manifest import (
    MAX_BATCH_ID,
    Manifest,
    SnapshotRef,
    validate_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.stores.base import (
    MANIFEST_SUFFIX,
    STREAMS_PREFIX,
    ManifestExistsError,
    SnapshotStore,
    record_key,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_streamstate.engine.state import StateReader, StateSelector

log = logging.getLogger("streamstate.validation")

RECORD_FORMAT = "streamstate.validation/v1"
VALIDATIONS_KIND = "validations"
LATEST_GOOD_PREFIX = "latest-good:"
SUITE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,127}$")
EXPECTATION_TYPE_RE = re.compile(r"^[a-z][a-z0-9_]{0,199}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_RECORD_BYTES = 4 * 1024 * 1024
MAX_EXPECTATIONS = 10_000
MAX_SUITE_BYTES = 4 * 1024 * 1024
SAMPLE_VALUES = 20  # unexpected values kept per expectation


def validate_suite_name(name: object) -> str:
    if not isinstance(name, str) or not SUITE_NAME_RE.match(name):
        raise UsageError(
            f"invalid suite name {name!r}",
            hint="name suites with 1-128 letters, digits, '.', '_', '=' or '-', starting with a letter or digit",
        )
    return name


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


# --- suites ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    """A suite as streamstate records it: its name, its normalised JSON definition (what
    the sha256 covers: name, expectations' type/kwargs/meta, meta), and where it came from."""

    name: str
    definition: dict[str, Any]
    source: str

    @property
    def sha256(self) -> str:
        canonical = json.dumps(self.definition, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def selector_hint(self) -> dict[str, Any]:
        """`meta.streamstate` of the suite: which operator/store/join side it is written for."""
        meta = self.definition.get("meta") or {}
        hint = meta.get("streamstate") if isinstance(meta, dict) else None
        return dict(hint) if isinstance(hint, dict) else {}


def _normalise(d: dict[str, Any], source: str) -> dict[str, Any]:
    """Keep what defines a suite; drop GX's generated ids and version stamps."""
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"suite {source} has no name", hint='give the suite a "name" field')
    validate_suite_name(name)
    exps = d.get("expectations")
    if not isinstance(exps, list):
        raise UsageError(f"suite {name} ({source}) has no expectations list", hint='add "expectations": [...]')
    if len(exps) > MAX_EXPECTATIONS:
        raise UsageError(f"suite {name} has {len(exps)} expectations", hint=f"at most {MAX_EXPECTATIONS}")
    out = []
    for i, e in enumerate(exps):
        if not isinstance(e, dict):
            raise UsageError(f"suite {name}: expectation {i} is not an object", hint='write {"type": ..., "kwargs": {...}}')
        etype = e.get("type", e.get("expectation_type"))
        kwargs = e.get("kwargs", {})
        if not isinstance(etype, str) or not EXPECTATION_TYPE_RE.match(etype):
            raise UsageError(f"suite {name}: expectation {i} has no valid type ({etype!r})",
                             hint="e.g. expect_column_values_to_not_be_null")
        if not isinstance(kwargs, dict):
            raise UsageError(f"suite {name}: expectation {i} ({etype}) has kwargs that are not an object",
                             hint='write "kwargs": {"column": ...}')
        item: dict[str, Any] = {"type": etype, "kwargs": kwargs}
        if isinstance(e.get("meta"), dict) and e["meta"]:
            item["meta"] = e["meta"]
        out.append(item)
    raw_meta = d.get("meta")
    meta = {k: v for k, v in raw_meta.items() if k != "great_expectations_version"} if isinstance(raw_meta, dict) else {}
    return {"name": name, "expectations": out, "meta": meta}


def load_suite(source: str | Path | dict[str, Any] | Callable[[], Any] | Any) -> Suite:
    """A suite from a GX JSON suite file, a dict of that form, a GX `ExpectationSuite`, or a
    callable returning either. Every expectation is checked against GX's registry and its
    own argument model here, so a typo fails before any Spark work."""
    if callable(source) and not isinstance(source, (str, Path)) and not _is_gx_suite(source):
        label = f"{getattr(source, '__module__', '?')}.{getattr(source, '__qualname__', repr(source))}"
        try:
            value = source()
        except Exception as exc:  # noqa: BLE001 - the user's code: say which callable failed
            raise UsageError(f"suite callable {label} failed: {type(exc).__name__}: {exc}") from None
        return load_suite_value(value, label)
    if isinstance(source, dict) or _is_gx_suite(source):
        return load_suite_value(source, "<dict>" if isinstance(source, dict) else "<ExpectationSuite>")
    path = Path(str(source)).expanduser()
    if not path.is_file():
        raise UsageError(f"suite file {path} does not exist", hint="give the path of a GX suite JSON file")
    if path.stat().st_size > MAX_SUITE_BYTES:
        raise UsageError(f"suite file {path} is larger than {MAX_SUITE_BYTES} bytes")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"suite file {path} is not valid JSON: {exc}", hint="fix the file (GX's suite JSON)") from None
    if not isinstance(data, dict):
        raise UsageError(f"suite file {path} is not a JSON object", hint='write {"name": ..., "expectations": [...]}')
    return load_suite_value(data, str(path))


def _is_gx_suite(value: Any) -> bool:
    return type(value).__name__ == "ExpectationSuite" and hasattr(value, "to_json_dict")


def load_suite_value(value: Any, source: str) -> Suite:
    if _is_gx_suite(value):
        value = value.to_json_dict()
    if not isinstance(value, dict):
        raise UsageError(f"suite from {source} is a {type(value).__name__}, not a suite",
                         hint="return a great_expectations ExpectationSuite or its JSON dict")
    definition = _normalise(value, source)
    _check_with_gx(definition)
    return Suite(definition["name"], definition, source)


def _gx() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    import great_expectations

    return great_expectations


def _check_with_gx(definition: dict[str, Any]) -> None:
    """Unknown expectation types and bad arguments, one line each (GX itself would log and
    silently drop an unknown type)."""
    import difflib

    _gx()
    from great_expectations.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.registry import (
        get_expectation_impl,
        list_registered_expectation_implementations,
    )

    name = definition["name"]
    for i, e in enumerate(definition["expectations"]):
        try:
            impl = get_expectation_impl(e["type"])
        except ExpectationNotFoundError:
            close = difflib.get_close_matches(e["type"], list_registered_expectation_implementations(), n=3)
            raise UsageError(
                f"suite {name}: unknown expectation type {e['type']!r} (expectation {i})",
                hint=f"did you mean {', '.join(close)}?" if close else "see GX's expectation gallery for the type names",
            ) from None
        try:
            impl(**e["kwargs"])
        except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError and GX's own
            first = " ".join(str(exc).split())[:300]
            raise UsageError(f"suite {name}: expectation {i} ({e['type']}) has invalid arguments: {first}") from None


def _gx_suite(definition: dict[str, Any]) -> Any:
    gx = _gx()
    exps = []
    for e in definition["expectations"]:
        from great_expectations.expectations.registry import get_expectation_impl

        impl = get_expectation_impl(e["type"])
        exps.append(impl(**e["kwargs"], **({"meta": e["meta"]} if e.get("meta") else {})))
    return gx.ExpectationSuite(name=definition["name"], expectations=exps, meta=definition.get("meta") or None)


# --- running a suite ------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result: what it checked and what it observed."""

    type: str
    kwargs: dict[str, Any]
    success: bool
    observed: Any  # observed_value, or a summary of unexpected values for column maps
    exception: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "kwargs": self.kwargs, "success": self.success, "observed": self.observed,
                "exception": self.exception}

    def describe(self) -> str:
        col = self.kwargs.get("column")
        where = f"({col})" if col else ""
        what = f"raised {self.exception}" if self.exception else f"observed {json.dumps(self.observed, default=str)}"
        return f"{self.type}{where} {what}"


def _json_safe(value: Any) -> Any:
    """Plain JSON: datetimes, decimals and numpy scalars as strings or numbers; NaN as None."""
    value = json.loads(json.dumps(value, default=str, allow_nan=True))

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return clean(value)


def _outcome(r: dict[str, Any]) -> ExpectationOutcome:
    cfg = r.get("expectation_config") or {}
    kwargs = {k: v for k, v in (cfg.get("kwargs") or {}).items() if k != "batch_id"}
    res = r.get("result") or {}
    if "observed_value" in res:
        observed: Any = res["observed_value"]
    elif "unexpected_count" in res:
        observed = {
            "element_count": res.get("element_count"),
            "unexpected_count": res.get("unexpected_count"),
            "unexpected_percent": res.get("unexpected_percent"),
            "partial_unexpected_list": (res.get("partial_unexpected_list") or [])[:SAMPLE_VALUES],
        }
    else:
        observed = None
    exc = (r.get("exception_info") or {})
    message = exc.get("exception_message") if exc.get("raised_exception") else None
    if message:
        message = " ".join(str(message).split())[:500]
    return ExpectationOutcome(str(cfg.get("type")), _json_safe(kwargs), bool(r.get("success")), _json_safe(observed),
                              message)


@dataclass(frozen=True)
class SuiteRun:
    """What GX said about one DataFrame."""

    success: bool
    results: list[ExpectationOutcome]
    gx_version: str
    seconds: float
    data_docs: str | None  # index.html of the Data Docs site, when asked for


def run_suite(df: DataFrame, suite: Suite, *, data_docs: str | Path | None = None) -> SuiteRun:
    """Run `suite` on `df` in a fresh ephemeral GX context; Data Docs HTML to `data_docs`."""
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    started = time.monotonic()
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    bd = ctx.data_sources.add_spark("streamstate").add_dataframe_asset("state").add_batch_definition_whole_dataframe(
        "whole")
    gsuite = ctx.suites.add(_gx_suite(suite.definition))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{suite.name}-run", data=bd, suite=gsuite))
    docs_index: str | None = None
    if data_docs is not None:
        from great_expectations.checkpoint import UpdateDataDocsAction

        docs_dir = Path(data_docs).expanduser().resolve()
        docs_dir.mkdir(parents=True, exist_ok=True)
        ctx.add_data_docs_site("ss_docs", {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        })
        cp = ctx.checkpoints.add(gx.Checkpoint(
            name=f"{suite.name}-checkpoint", validation_definitions=[vd],
            actions=[UpdateDataDocsAction(name="docs", site_names=["ss_docs"])],
        ))
        cp_result = cp.run(batch_parameters={"dataframe": df})
        result = next(iter(cp_result.run_results.values()))
        docs_index = str(docs_dir / "index.html")
    else:
        result = vd.run(batch_parameters={"dataframe": df})
    d = result.to_json_dict()
    outcomes = [_outcome(r) for r in d.get("results", [])]
    return SuiteRun(bool(d.get("success")), outcomes, str(gx.__version__), time.monotonic() - started, docs_index)


# --- the record -----------------------------------------------------------------------------


def validation_key(stream: str, snapshot_id: str, suite: str) -> str:
    return record_key(stream, VALIDATIONS_KIND, f"{snapshot_id}/{suite}")


@dataclass(frozen=True)
class ValidationRecord:
    """A suite's result on one snapshot, as stored (write-once) beside its manifest."""

    stream: str
    snapshot_id: str
    batch_id: int
    suite: str
    suite_sha256: str
    success: bool
    validated_at: str
    gx_version: str
    duration_s: float
    selector: dict[str, Any]
    results: list[ExpectationOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [r for r in self.results if not r.success]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "stream": self.stream,
            "snapshot_id": self.snapshot_id,
            "batch_id": self.batch_id,
            "suite": self.suite,
            "suite_sha256": self.suite_sha256,
            "success": self.success,
            "validated_at": self.validated_at,
            "gx_version": self.gx_version,
            "duration_s": round(self.duration_s, 3),
            "selector": self.selector,
            "evaluated": len(self.results),
            "failed": len(self.failed),
            "results": [r.to_json() for r in self.results],
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, *, stream: str, snapshot_id: str, suite: str) -> ValidationRecord:
        """Parse an untrusted record stored as (stream, snapshot_id, suite); anything off is
        an UnsafeManifestError naming the record."""
        where = f"validation record {stream}/{snapshot_id}/{suite}"

        def bad(why: str) -> UnsafeManifestError:
            return UnsafeManifestError(
                f"{where} is invalid: {why}",
                hint="it was not written by streamstate or is damaged; compare with a replica, or validate a copy",
            )

        if len(data) > MAX_RECORD_BYTES:
            raise bad(f"{len(data)} bytes, more than {MAX_RECORD_BYTES}")
        try:
            d = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise bad(f"not JSON ({type(exc).__name__})") from None
        if not isinstance(d, dict):
            raise bad("not a JSON object")
        if d.get("format") != RECORD_FORMAT:
            raise bad(f"format {d.get('format')!r} is not {RECORD_FORMAT!r}")
        for key, want in (("stream", stream), ("snapshot_id", snapshot_id), ("suite", suite)):
            if d.get(key) != want:
                raise bad(f"its {key} {d.get(key)!r} is not {want!r}")
        batch = d.get("batch_id")
        if not isinstance(batch, int) or isinstance(batch, bool) or not 0 <= batch <= MAX_BATCH_ID:
            raise bad(f"batch_id {batch!r}")
        if batch != SnapshotRef.parse(snapshot_id).batch_id:
            raise bad(f"batch_id {batch} is not the snapshot's")
        sha = d.get("suite_sha256")
        if not isinstance(sha, str) or not SHA256_RE.match(sha):
            raise bad(f"suite_sha256 {sha!r}")
        success = d.get("success")
        if not isinstance(success, bool):
            raise bad(f"success {success!r} is not true or false")
        at = d.get("validated_at")
        try:
            when = datetime.fromisoformat(str(at).replace("Z", "+00:00"))
        except ValueError:
            raise bad(f"validated_at {at!r} is not an ISO time") from None
        offset = when.utcoffset()
        if not isinstance(at, str) or offset is None or offset.total_seconds() != 0:
            raise bad(f"validated_at {at!r} is not in UTC")
        gxv = d.get("gx_version")
        if not isinstance(gxv, str) or len(gxv) > 64:
            raise bad(f"gx_version {gxv!r}")
        dur = d.get("duration_s")
        if not isinstance(dur, (int, float)) or isinstance(dur, bool) or not math.isfinite(dur) or dur < 0:
            raise bad(f"duration_s {dur!r}")
        sel = d.get("selector", {})
        if not isinstance(sel, dict):
            raise bad("selector is not an object")
        raw = d.get("results")
        if not isinstance(raw, list) or len(raw) > MAX_EXPECTATIONS:
            raise bad("results is not a list of expectation results")
        results = []
        for i, r in enumerate(raw):
            if not isinstance(r, dict):
                raise bad(f"result {i} is not an object")
            rtype, ok, kwargs, raised = r.get("type"), r.get("success"), r.get("kwargs", {}), r.get("exception")
            if not isinstance(rtype, str) or not EXPECTATION_TYPE_RE.match(rtype):
                raise bad(f"result {i} has type {rtype!r}")
            if not isinstance(ok, bool) or not isinstance(kwargs, dict) or not (raised is None or isinstance(raised, str)):
                raise bad(f"result {i} ({rtype}) has an invalid success, kwargs or exception")
            results.append(ExpectationOutcome(rtype, kwargs, ok, r.get("observed"), raised))
        if success != all(r.success for r in results):
            raise bad(f"it says success={success} while its expectations say otherwise")
        for key, n in (("evaluated", len(results)), ("failed", sum(1 for r in results if not r.success))):
            if key in d and d[key] != n:
                raise bad(f"{key} {d[key]!r} does not match its {n} results")
        return cls(stream, snapshot_id, batch, suite, sha, success, at, gxv, float(dur), sel, results)


def get_validation(store: SnapshotStore, stream: str, snapshot_id: str, suite: str) -> ValidationRecord | None:
    """The stored result of `suite` on a snapshot, or None; a damaged record is an error."""
    validate_stream_name(stream)
    validate_snapshot_id(snapshot_id)
    validate_suite_name(suite)
    data = store.get_record(validation_key(stream, snapshot_id, suite))
    if data is None:
        return None
    return ValidationRecord.from_json(data, stream=stream, snapshot_id=snapshot_id, suite=suite)


def put_validation(store: SnapshotStore, record: ValidationRecord) -> ValidationRecord:
    """Store a record write-once; when one is already there (a concurrent validation), that
    one is returned and this one dropped."""
    key = validation_key(record.stream, record.snapshot_id, record.suite)
    try:
        store.put_record(key, record.to_bytes())
        return record
    except ManifestExistsError:
        existing = get_validation(store, record.stream, record.snapshot_id, record.suite)
        if existing is None:
            raise
        return existing


def validation_status(
    store: SnapshotStore, stream: str, snapshot_ids: list[str] | None = None
) -> dict[str, dict[str, bool | None]]:
    """{snapshot id: {suite: success}} of the stored records of a stream's snapshots
    (default: all of them); a damaged record shows as None (never as passed)."""
    out: dict[str, dict[str, bool | None]] = {}
    for snapshot_id in store.list_snapshot_ids(stream) if snapshot_ids is None else snapshot_ids:
        prefix = f"{STREAMS_PREFIX}/{stream}/{VALIDATIONS_KIND}/{snapshot_id}/"
        for key in store.list_records(prefix):
            name = key[len(prefix):]
            if not name.endswith(MANIFEST_SUFFIX) or "/" in name:
                continue
            suite = name[: -len(MANIFEST_SUFFIX)]
            try:
                rec = get_validation(store, stream, snapshot_id, suite)
                out.setdefault(snapshot_id, {})[suite] = None if rec is None else rec.success
            except (UnsafeManifestError, UsageError) as exc:
                log.warning("unreadable validation record %s: %s", key, exc.one_line())
                out.setdefault(snapshot_id, {})[suite] = None
    return out


def latest_good_snapshot(store: SnapshotStore, stream: str, suite: str) -> Manifest:
    """The newest snapshot on the stream's current timeline that passed `suite`."""
    from airflow_provider_streamstate.engine.catalog import get_snapshot, no_snapshots_error
    from airflow_provider_streamstate.engine.timeline import load_timelines, snapshot_refs

    validate_suite_name(suite)
    refs = snapshot_refs(store, stream)
    if not refs:
        raise no_snapshots_error(store, stream)
    tls = load_timelines(store, stream, refs)
    for ref in sorted((r for r in refs if tls.contains(r)), key=lambda r: (r.batch_id, r.created), reverse=True):
        try:
            rec = get_validation(store, stream, ref.snapshot_id, suite)
        except UnsafeManifestError as exc:
            log.warning("skipping %s: %s", ref.snapshot_id, exc.one_line())
            continue
        if rec is not None and rec.success:
            return get_snapshot(store, stream, ref.snapshot_id)
    raise NotFoundError(
        f"no snapshot of {stream} on its current timeline has passed suite {suite}",
        hint=f"validate one first: streamstate validate --store {store.url} --stream {stream} SNAPSHOT --suite FILE",
    )


# --- validating a snapshot ------------------------------------------------------------------


@dataclass(frozen=True)
class ValidationResult:
    """The record of one validation and how it was obtained."""

    record: ValidationRecord
    reused: bool  # True: the stored record answered, no suite ran
    recorded: bool  # True: the record is in the store
    data_docs: str | None = None

    @property
    def success(self) -> bool:
        return self.record.success

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "snapshot_id": r.snapshot_id,
            "stream": r.stream,
            "batch_id": r.batch_id,
            "suite": r.suite,
            "suite_sha256": r.suite_sha256,
            "success": r.success,
            "evaluated": len(r.results),
            "failed": [{"type": o.type, "column": o.kwargs.get("column"), "observed": o.observed,
                        "exception": o.exception} for o in r.failed],
            "validated_at": r.validated_at,
            "gx_version": r.gx_version,
            "duration_s": round(r.duration_s, 3),
            "reused": self.reused,
            "recorded": self.recorded,
            "data_docs": self.data_docs,
        }

    def summary(self) -> str:
        r = self.record
        if r.success:
            return f"suite {r.suite} passed on {r.snapshot_id} ({len(r.results)} expectations)"
        failed = "; ".join(o.describe() for o in r.failed)
        return f"suite {r.suite} failed on {r.snapshot_id}: {len(r.failed)} of {len(r.results)} expectations: {failed}"


def selector_for(suite: Suite, selector: StateSelector | None) -> StateSelector:
    """The caller's selector, else the suite's `meta.streamstate`, else operator 0."""
    from airflow_provider_streamstate.engine.state import StateSelector

    if selector is not None and (selector.operator is not None or selector.store_name or selector.join_side):
        return selector
    hint = suite.selector_hint
    return StateSelector(hint.get("operator"), hint.get("store_name"), hint.get("join_side"))


COLUMN_KWARGS = ("column", "column_A", "column_B")


def check_columns(suite: Suite, columns: list[str], where: str) -> None:
    """A column the state does not have is a mistake in the suite (GX would only report the
    expectation as failed): say which column, and which columns there are."""
    have = set(columns)
    for i, e in enumerate(suite.definition["expectations"]):
        kw = e["kwargs"]
        named = [kw[k] for k in COLUMN_KWARGS if isinstance(kw.get(k), str)]
        named += [c for c in kw.get("column_list") or [] if isinstance(c, str)]
        for col in named:
            if col not in have:
                raise UsageError(
                    f"suite {suite.name}: expectation {i} ({e['type']}) names column {col!r}, which the state of "
                    f"{where} does not have",
                    hint=f"its columns: {', '.join(columns)} (see docs/state.md for the naming)",
                )


def _check_reusable(existing: ValidationRecord, suite: Suite, sel: StateSelector) -> None:
    if existing.suite_sha256 != suite.sha256 or existing.selector != sel.to_json():
        raise UsageError(
            f"snapshot {existing.snapshot_id} already has a result for suite {suite.name} from a different "
            f"definition (suite sha256 {existing.suite_sha256[:12]}, selector {existing.selector})",
            hint=f"validation records are write-once: give the changed suite a new name (e.g. {suite.name}-v2)",
        )


def validate_snapshot(
    reader: StateReader,
    stream: str,
    snapshot: str,
    suite: Suite,
    *,
    selector: StateSelector | None = None,
    store: SnapshotStore | None = None,
    record: bool = True,
    data_docs: str | Path | None = None,
) -> ValidationResult:
    """Run `suite` on a snapshot's state and store the result write-once.

    A stored result of the same suite (same sha256 and selector) is reused without running
    anything, unless `data_docs` asks for HTML; a different suite under the same name is
    refused. `record=False` runs and stores nothing.
    """
    from airflow_provider_streamstate.engine.catalog import resolve_snapshot

    st = store or reader.store
    if st is None:
        raise UsageError("no snapshot store given", hint="pass store= to StateReader or to validate_snapshot")
    from airflow_provider_streamstate.engine.state import canonical_selector

    manifest = resolve_snapshot(st, stream, snapshot)
    sel = canonical_selector(manifest, selector_for(suite, selector))
    existing = get_validation(st, stream, manifest.snapshot_id, suite.name)
    if existing is not None:
        _check_reusable(existing, suite, sel)
        if data_docs is None:
            return ValidationResult(existing, reused=True, recorded=True)
    df = reader.state(stream, manifest.snapshot_id, sel, store=st)
    check_columns(suite, df.columns, f"{sel.describe()} of {manifest.snapshot_id}")
    run = run_suite(df, suite, data_docs=data_docs)
    rec = ValidationRecord(
        stream=stream, snapshot_id=manifest.snapshot_id, batch_id=manifest.batch_id, suite=suite.name,
        suite_sha256=suite.sha256, success=run.success, validated_at=_now(), gx_version=run.gx_version,
        duration_s=run.seconds, selector=sel.to_json(), results=run.results,
    )
    if existing is not None:
        return ValidationResult(existing, reused=True, recorded=True, data_docs=run.data_docs)
    if record:
        rec = put_validation(st, rec)
    log.info("suite %s on %s of %s: %s", suite.name, manifest.snapshot_id, stream, "passed" if rec.success else "FAILED")
    return ValidationResult(rec, reused=False, recorded=record, data_docs=run.data_docs)
