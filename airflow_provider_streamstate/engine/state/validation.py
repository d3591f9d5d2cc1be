"""Validating a snapshot's state with a Great Expectations suite.

A suite (GX Core 1.x's own JSON form, `{"name", "expectations": [{"type", "kwargs"}]}`, or
a Python callable returning an `ExpectationSuite`) runs on one operator's flattened state
(engine/state/reader.py) through GX's Spark dataframe datasource in an ephemeral context. The
result is stored write-once beside the immutable manifest (engine/catalog/validation_records.py):
validating again reuses it, and a changed suite under the same name is refused (give it a
new name).

great_expectations is imported only inside the functions that run it (8-13 s to import).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import (
    EXPECTATION_TYPE_RE,
    MAX_EXPECTATIONS,
    ExpectationOutcome,
    ValidationRecord,
    get_validation,
    put_validation,
    validate_suite_name,
)
from airflow_provider_streamstate.engine.core.errors import UsageError, missing_extra
from airflow_provider_streamstate.engine.state.reader import StateSelector, canonical_selector
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector

log = logging.getLogger("streamstate.validation")

MAX_SUITE_BYTES = 4 * 1024 * 1024
SAMPLE_VALUES = 20  # unexpected values kept per expectation


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
        """`meta.streamstate` of the suite: which operator/store/join side/state variable it is
        written for."""
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


def load_suite(source: str | Path | dict[str, Any] | Callable[[], Any] | Any, *, check: bool = True) -> Suite:
    """A suite from a GX JSON suite file, a dict of that form, a GX `ExpectationSuite`, or a
    callable returning either. Every expectation is checked against GX's registry and its
    own argument model here, so a typo fails before any Spark work; `check=False` checks the
    JSON's shape only (a caller that submits the suite to a cluster need not import GX, the
    job checks it there before it reads any state)."""
    if callable(source) and not isinstance(source, (str, Path)) and not _is_gx_suite(source):
        label = f"{getattr(source, '__module__', '?')}.{getattr(source, '__qualname__', repr(source))}"
        try:
            value = source()
        except Exception as exc:  # noqa: BLE001 - the user's code: say which callable failed
            raise UsageError(f"suite callable {label} failed: {type(exc).__name__}: {exc}") from None
        return load_suite_value(value, label, check=check)
    if isinstance(source, dict) or _is_gx_suite(source):
        return load_suite_value(source, "<dict>" if isinstance(source, dict) else "<ExpectationSuite>", check=check)
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
    return load_suite_value(data, str(path), check=check)


def _is_gx_suite(value: Any) -> bool:
    return type(value).__name__ == "ExpectationSuite" and hasattr(value, "to_json_dict")


def load_suite_value(value: Any, source: str, *, check: bool = True) -> Suite:
    if _is_gx_suite(value):
        value = value.to_json_dict()
    if not isinstance(value, dict):
        raise UsageError(f"suite from {source} is a {type(value).__name__}, not a suite",
                         hint="return a great_expectations ExpectationSuite or its JSON dict")
    definition = _normalise(value, source)
    if check:
        _check_with_gx(definition)
    return Suite(definition["name"], definition, source)


def _gx() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    try:
        import great_expectations
    except ModuleNotFoundError as exc:
        if exc.name != "great_expectations":
            raise
        raise missing_extra("great_expectations", "validating state with Great Expectations") from None

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
    """GX's suite object from a copy of `definition`: GX writes into the dicts it is given
    (its version into `meta`), and the suite's sha256 must stay the definition's."""
    import copy

    definition = copy.deepcopy(definition)
    gx = _gx()
    exps = []
    for e in definition["expectations"]:
        from great_expectations.expectations.registry import get_expectation_impl

        impl = get_expectation_impl(e["type"])
        exps.append(impl(**e["kwargs"], **({"meta": e["meta"]} if e.get("meta") else {})))
    return gx.ExpectationSuite(name=definition["name"], expectations=exps, meta=definition.get("meta") or None)


# --- running a suite ------------------------------------------------------------------------



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


# GX's default result format (SUMMARY) collects a sample of unexpected values for every column
# expectation: one more Spark job each, even when nothing is unexpected (half the jobs of a
# passing suite, docs/performance.md). The first run counts without sampling; only a suite
# that failed runs again with samples, which its record keeps.
COUNTS_ONLY = {"result_format": "BASIC", "partial_unexpected_count": 0}
WITH_SAMPLES = "SUMMARY"


def run_suite(df: DataFrame, suite: Suite, *, data_docs: str | Path | None = None) -> SuiteRun:
    """Run `suite` on `df` in a fresh ephemeral GX context; Data Docs HTML to `data_docs`.
    A passing suite costs GX's counting jobs only; a failing one is run again for samples
    of the unexpected values (see COUNTS_ONLY). GX resolves its metrics level by level, one
    Spark job each, so `df` is cached for the run: the state is read once, not once a level."""
    if df.is_cached:
        return _run_suite(df, suite, data_docs)
    from pyspark import StorageLevel

    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _run_suite(df, suite, data_docs)
    finally:
        df.unpersist()


def _run_suite(df: DataFrame, suite: Suite, data_docs: str | Path | None) -> SuiteRun:
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
        result = vd.run(batch_parameters={"dataframe": df}, result_format=COUNTS_ONLY)
        if not result.success:
            result = vd.run(batch_parameters={"dataframe": df}, result_format=WITH_SAMPLES)
    d = result.to_json_dict()
    outcomes = [_outcome(r) for r in d.get("results", [])]
    return SuiteRun(bool(d.get("success")), outcomes, str(gx.__version__), time.monotonic() - started, docs_index)


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

    if selector is not None and (selector.operator is not None or selector.store_name or selector.join_side
                                 or selector.state_var):
        return selector
    return StateSelector.from_json(suite.selector_hint)


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


DATA_DOCS_KEY = "data_docs"  # a record keeps its run's Data Docs location beside the selector's fields


def same_selector(recorded: dict[str, Any], sel: StateSelector) -> bool:
    """Whether a record's selector is `sel` (the Data Docs location it may carry aside)."""
    return {k: v for k, v in recorded.items() if k != DATA_DOCS_KEY} == sel.to_json()


def _check_reusable(existing: ValidationRecord, suite: Suite, sel: StateSelector) -> None:
    if existing.suite_sha256 != suite.sha256 or not same_selector(existing.selector, sel):
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
    data_docs_location: str | None = None,
) -> ValidationResult:
    """Run `suite` on a snapshot's state and store the result write-once.

    A stored result of the same suite (same sha256 and selector) is reused without running
    anything, unless `data_docs` asks for HTML; a different suite under the same name is
    refused. `record=False` runs and stores nothing. The record keeps where the Data Docs
    are (`data_docs_location`, e.g. the `s3://` URL they are uploaded to; default their
    index file), so the snapshot's page can show them.
    """

    st = store or reader.store
    if st is None:
        raise UsageError("no snapshot store given", hint="pass store= to StateReader or to validate_snapshot")

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
    docs = data_docs_location or run.data_docs
    rec = ValidationRecord(
        stream=stream, snapshot_id=manifest.snapshot_id, batch_id=manifest.batch_id, suite=suite.name,
        suite_sha256=suite.sha256, success=run.success, validated_at=_now(), gx_version=run.gx_version,
        duration_s=run.seconds, selector={**sel.to_json(), **({DATA_DOCS_KEY: docs} if docs else {})},
        results=run.results,
    )
    if existing is not None:
        return ValidationResult(existing, reused=True, recorded=True, data_docs=run.data_docs)
    if record:
        rec = put_validation(st, rec)
    log.info("suite %s on %s of %s: %s", suite.name, manifest.snapshot_id, stream, "passed" if rec.success else "FAILED")
    return ValidationResult(rec, reused=False, recorded=record, data_docs=run.data_docs)
