"""Comparing two states key by key: what a batch range (or a candidate job on a clone) did.

Both sides are flattened state DataFrames (engine/state/reader.py). A full outer join on the key
columns (null-safe) sorts every key into added (only in B), removed (only in A), changed
(value columns differ, null-safe) or unchanged. Spark does the join and the counting; the
driver receives four counts and a small sample of each kind, never the state itself.
The samples come out of the counting aggregate itself, one pass and no cache: it groups each
kind's keys into hash buckets and keeps the smallest key of each bucket, and the driver takes
the smallest `sample` of those. They are the kind's smallest keys except where two of them
share a bucket (1 in 64 x `sample` buckets); a kind with no more keys than `sample` is shown
whole (a second pass fetches it when two of its keys shared a bucket).
`partition_id` is not compared: a clone may run with another number of partitions.
A transformWithState list variable has no key per element, and a key can hold several
timers: both are compared as multisets (each distinct element of a key,
`key_element_<field>`, with its `value_element_count`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.state.reader import key_columns, value_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
    from airflow_provider_streamstate.engine.stores.base import SnapshotStore

KINDS = ("added", "removed", "changed", "unchanged")
_STATUS = "__streamstate_status"
_MAX_BUCKETS = 4096  # rows the driver receives per kind, at most


@dataclass(frozen=True)
class StateDiff:
    """Counts and samples of keys added, removed, changed and unchanged from A to B."""

    a: str
    b: str
    key_columns: list[str]
    value_columns: list[str]
    counts: dict[str, int]
    samples: dict[str, list[dict[str, Any]]]  # per kind: {"key": {...}, "before": {...}, "after": {...}}
    only_in_a: list[str]  # value columns A has and B lacks (not compared)
    only_in_b: list[str]

    @property
    def identical(self) -> bool:
        return not (self.counts["added"] or self.counts["removed"] or self.counts["changed"])

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b, "identical": self.identical, "key_columns": self.key_columns,
            "value_columns": self.value_columns, **self.counts, "samples": self.samples,
            "only_in_a": self.only_in_a, "only_in_b": self.only_in_b,
        }

    def summary(self) -> str:
        c = self.counts
        return (f"{self.a} -> {self.b}: {c['added']} added, {c['removed']} removed, {c['changed']} changed, "
                f"{c['unchanged']} unchanged")


def _plain(v: Any) -> Any:
    """A Spark row value as JSON: timestamps and decimals as text."""
    return json.loads(json.dumps(v, default=str))


def diff_states(a: DataFrame, b: DataFrame, *, sample: int = 5, a_name: str = "A", b_name: str = "B") -> StateDiff:
    """Key-by-key comparison of two flattened states, computed in Spark."""
    from pyspark.sql import functions as F


    keys_a, keys_b = key_columns(a), key_columns(b)
    if not keys_a or keys_a != keys_b:
        raise UsageError(
            f"the two states have different keys ({', '.join(keys_a) or 'none'} vs {', '.join(keys_b) or 'none'})",
            hint="compare the same operator of the same query (check --operator)",
        )
    vals_a, vals_b = value_columns(a), value_columns(b)
    common = [c for c in vals_a if c in vals_b]
    sa = a.select(*[F.col(k).alias(f"a_{k}") for k in keys_a], *[F.col(v).alias(f"a_{v}") for v in common],
                  F.lit(True).alias("a__present"))
    sb = b.select(*[F.col(k).alias(f"b_{k}") for k in keys_a], *[F.col(v).alias(f"b_{v}") for v in common],
                  F.lit(True).alias("b__present"))
    cond = None
    for k in keys_a:
        c = F.col(f"a_{k}").eqNullSafe(F.col(f"b_{k}"))
        cond = c if cond is None else cond & c
    joined = sa.join(sb, cond, "full_outer")
    same = F.lit(True)
    for v in common:
        same = same & F.col(f"a_{v}").eqNullSafe(F.col(f"b_{v}"))
    status = (
        F.when(F.col("a__present").isNull(), F.lit("added"))
        .when(F.col("b__present").isNull(), F.lit("removed"))
        .when(same, F.lit("unchanged"))
        .otherwise(F.lit("changed"))
    )
    return _diff_one_pass(joined.withColumn(_STATUS, status), keys_a, common, a_name, b_name,
                          [c for c in vals_a if c not in vals_b], [c for c in vals_b if c not in vals_a], sample)


def list_elements(df: DataFrame) -> DataFrame:
    """A list state variable (or the timers) as a multiset: one row per distinct (key,
    element) with its `element_count`, so a diff counts elements added and removed (a list
    has no element key; a key can hold several timers)."""
    from pyspark.sql import functions as F

    element = [c for c in df.columns if c != "partition_id"]
    keys = set(key_columns(df))
    renamed = [F.col(c) if c in keys else F.col(c).alias(f"key_element_{c.removeprefix('value_')}")
               for c in element]
    return df.groupBy(*element).agg(F.count("*").alias("value_element_count")).select(*renamed,
                                                                                       "value_element_count")


def _item(kind: str, d: dict[str, Any], keys: list[str], common: list[str]) -> dict[str, Any]:
    side = "b" if kind == "added" else "a"
    item: dict[str, Any] = {"key": {k: _plain(d[f"{side}_{k}"]) for k in keys}}
    if kind != "added":
        item["before"] = {v: _plain(d[f"a_{v}"]) for v in common}
    if kind != "removed":
        item["after"] = {v: _plain(d[f"b_{v}"]) for v in common}
    return item


def _diff_one_pass(classified: DataFrame, keys: list[str], common: list[str], a_name: str, b_name: str,
                   only_a: list[str], only_b: list[str], sample: int) -> StateDiff:
    """Counts and up to `sample` keys of each kind from one aggregate. A struct's minimum
    orders by its first fields, A's keys (null for every added key) then B's, so each
    bucket's minimum is its smallest key; one bucket (`sample` 1) gives the smallest key."""
    from pyspark.sql import functions as F

    fields = [f"a_{k}" for k in keys] + [f"b_{k}" for k in keys] + [f"a_{v}" for v in common] + \
        [f"b_{v}" for v in common]
    counts = {k: 0 for k in KINDS}
    firsts: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    buckets = 1 if sample <= 1 else min(64 * sample, _MAX_BUCKETS)
    bucket = F.pmod(F.xxhash64(*[F.coalesce(F.col(f"a_{k}"), F.col(f"b_{k}")) for k in keys]), F.lit(buckets))
    aggregates = [F.count("*").alias("n")] + ([F.min(F.struct(*fields)).alias("first")] if sample > 0 else [])
    for row in classified.groupBy(F.col(_STATUS), bucket.alias("bucket")).agg(*aggregates).collect():
        counts[row[_STATUS]] += int(row["n"])
        if sample > 0:
            firsts[row[_STATUS]].append(row["first"].asDict())
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for kind in KINDS:
        side = "b" if kind == "added" else "a"
        rows = sorted(firsts[kind], key=lambda d: tuple((d[f"{side}_{k}"] is not None, d[f"{side}_{k}"]) for k in keys))
        if len(rows) < min(sample, counts[kind]):  # two of a small kind's keys shared a bucket
            order = [F.col(f"{side}_{k}") for k in keys]
            rows = [r.asDict() for r in classified.where(F.col(_STATUS) == kind).orderBy(*order).limit(sample).collect()]
        samples[kind] = [_item(kind, d, keys, common) for d in rows[:max(sample, 0)]]
    return StateDiff(a_name, b_name, keys, common, counts, samples, only_a, only_b)


def diff_snapshots(
    reader: StateReader,
    stream: str,
    a: str,
    b: str,
    selector: StateSelector | None = None,
    *,
    store: SnapshotStore | None = None,
    b_stream: str | None = None,
    b_store: SnapshotStore | None = None,
    sample: int = 5,
) -> StateDiff:
    """Diff snapshot `a` of `stream` against snapshot `b` of `b_stream` (default: the same
    stream; a clone's name compares a stream with its clone), same operator selection."""
    from airflow_provider_streamstate.engine.state.reader import (
        ALL_VARIABLES,
        StateSelector,
        state_variable_kind,
    )

    ma = reader.manifest(stream, a, store=store)
    other = b_stream or stream
    mb = reader.manifest(other, b, store=b_store or store)
    sel = selector or StateSelector()
    if sel.state_var == ALL_VARIABLES:
        raise UsageError("diff compares one state variable at a time", hint="name one with --state-var")
    da = reader.state(stream, ma.snapshot_id, selector, store=store)
    db = reader.state(other, mb.snapshot_id, selector, store=b_store or store)
    if state_variable_kind(ma, sel) in ("ListState", "TimerState"):  # several rows per key
        da, db = list_elements(da), list_elements(db)
    label_b = mb.snapshot_id if other == stream else f"{other}/{mb.snapshot_id}"
    return diff_states(da, db, sample=sample, a_name=ma.snapshot_id, b_name=label_b)
