"""Edits planned from the state itself: the keys of a bad state that a condition selects,
each set back to its value in a good snapshot (deleted where the key was not there yet) or
deleted (`plan_repair`); or every key's value (those a condition selects) passed through a
function of the user's, which returns the new value, a patch of it, or None to delete the
key (`plan_transform`). A plan is an explicit edit, every key and value named, so that a
person can read it before it is applied, and it applies the same way to a clone and, later,
to the stopped stream (whose state may have moved on since the plan: the named keys get the
named values).

Restoring a key to its last good value drops what that key received since (a replay of
those records would redo it); deleting a key lets the next records rebuild it from empty."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError, UsageError
from airflow_provider_streamstate.engine.edit.changes import (
    EditSpec,
    StoreEdit,
    compile_changes,
    matching_entries,
    provider_of,
    store_schema,
)
from airflow_provider_streamstate.engine.edit.preview import current_values
from airflow_provider_streamstate.engine.lookup.encodings import rocksdb_keys as rk
from airflow_provider_streamstate.engine.lookup.encodings.types import StructType
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import decode_row_values
from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable
from airflow_provider_streamstate.engine.lookup.reading.sources import StateSource

ACTIONS = ("restore", "delete")
Transform = Callable[[Any, Any], Any]  # (key, value) -> new value, a patch of it, or None (delete)
MAX_KEYS = 10_000  # keys a plan names one by one (beyond: an edit with delete_where)
SHOWN = 50  # keys the markdown lists


@dataclass(frozen=True)
class RepairPlan:
    """The edit that repairs the selected keys, and each key's value before and after it."""

    edit: EditSpec
    action: str  # restore, delete or transform
    where: str | None  # None: every key (a transform)
    bad: str  # the state the keys were selected in
    good: str | None  # the state restored keys take their values from
    rows: tuple[dict[str, Any], ...]  # {"key", "before", "after"} (after None: deleted)
    how: str = ""  # what happens to the selected keys, for people

    def to_json(self) -> dict[str, Any]:
        return {"edit": self.edit.to_json(), "action": self.action, "where": self.where, "bad": self.bad,
                "good": self.good, "keys": len(self.rows), "rows": [dict(r) for r in self.rows]}

    def markdown(self, shown: int = SHOWN) -> str:
        """The plan for a person to approve: what selects the keys, and each key's change."""
        selected = f" where `{self.where}`" if self.where else ""
        lines = [f"**{self.edit.description}**", "",
                 f"{len(self.rows)} key(s) of {self.bad}{selected}, {self.how}.", "",
                 "| key | now | after the edit |", "|---|---|---|"]
        for r in self.rows[:shown]:
            after = "*deleted*" if r["after"] is None else _cell(r["after"])
            lines.append(f"| {_cell(r['key'])} | {_cell(r['before'])} | {after} |")
        if len(self.rows) > shown:
            lines.append(f"| ... {len(self.rows) - shown} more | | |")
        return "\n".join(lines)


def plan_repair(
    bad: StateSource, where: str, *, action: str = "restore", good: StateSource | None = None,
    operator: int | str = 0, store: str = "default", description: str | None = None,
) -> RepairPlan:
    """The keys of `bad` whose entries satisfy `where` (a condition on the value's fields and
    `key.<column>`, engine/lookup/predicate.py), restored to their values in `good` or
    deleted; UsageError when the condition selects nothing or more than MAX_KEYS keys."""
    if action not in ACTIONS:
        raise UsageError(f"unknown repair action {action!r}", hint=f"one of: {', '.join(ACTIONS)}")
    if action == "restore" and good is None:
        raise UsageError("a restore repair needs the good state to take the values from",
                         hint="give the last good snapshot (bisect names it), or repair by delete")
    selected = []
    for key, value in matching_entries(bad, operator, store, where):
        selected.append((key, value))
        if len(selected) > MAX_KEYS:
            raise UsageError(f"the condition selects more than {MAX_KEYS} keys of {bad.description}",
                             hint=f'repair them with an edit {{"delete_where": {json.dumps(where)}}} instead')
    if not selected:
        raise UsageError(f"no key of operator {operator} ({store}) in {bad.description} satisfies {where!r}",
                         hint="check the condition against `streamstate state get`, or the operator and store")
    _, schema = store_schema(bad, operator, store)
    if good is not None and action == "restore":
        _, then = store_schema(good, operator, store)
        if (then.key, then.value) != (schema.key, schema.value):
            raise UsageError(f"the state's schema changed between {good.description} ({then.value.simple()}) and "
                             f"{bad.description} ({schema.value.simple()}): its values cannot be restored",
                             hint="the good snapshot predates a migration: repair by delete, or from a later "
                             "good snapshot")
    keys = [k for k, _ in selected]
    after = stored_values(good, operator, store, keys) if good is not None and action == "restore" else \
        [None] * len(keys)
    rows = tuple({"key": edit_json(_named(k, schema.key)), "before": edit_json(_named(v, schema.value)),
                  "after": None if a is None else edit_json(_named(a, schema.value))}
                 for (k, v), a in zip(selected, after, strict=True))
    restoring = action == "restore" and good is not None
    text = description or (f"restore {len(rows)} key(s) where {where} from {good.description}" if restoring
                           and good is not None else f"delete {len(rows)} key(s) where {where}")
    how = f"restored to their values in {good.description}" if restoring and good is not None else "deleted"
    return RepairPlan(_explicit(operator, store, rows, text), action, where, bad.description,
                      good.description if good is not None else None, rows, how)


def plan_transform(
    src: StateSource, fn: Transform, *, where: str | None = None, operator: int | str = 0,
    store: str = "default", name: str | None = None, description: str | None = None,
) -> RepairPlan:
    """Every entry of the store (those satisfying `where`) passed through `fn(key, value)`,
    each given by column name (in order where two columns share a name): it returns the
    new value, a dict of some columns (a patch over the old value), None (the key is
    deleted) or the value unchanged (the key is left alone). UsageError when nothing
    changes or more than MAX_KEYS keys would."""
    _, schema = store_schema(src, operator, store)
    label = name or str(getattr(fn, "__name__", "a function"))
    rows = []
    for k, v in matching_entries(src, operator, store, where):
        key, value = _named(k, schema.key), _named(v, schema.value)
        try:  # copies: a function that changes what it is given in place changes neither
            out = fn(copy.deepcopy(key), copy.deepcopy(value))
        except Exception as exc:  # noqa: BLE001 - the user's function: its error, named, in one line
            raise UsageError(f"{label} failed on key {edit_json(key)}: {type(exc).__name__}: {exc}",
                             hint="fix the function (it is called with the key and the value)") from None
        after = None if out is None else _new_value(out, value, label)
        if after == value:
            continue
        rows.append({"key": edit_json(key), "before": edit_json(value),
                     "after": None if after is None else edit_json(after)})
        if len(rows) > MAX_KEYS:
            raise UsageError(f"{label} changes more than {MAX_KEYS} keys of {src.description}",
                             hint="narrow it with a condition (where), and run it more than once")
    if not rows:
        raise UsageError(f"{label} changes no key of operator {operator} ({store}) in {src.description}"
                         + (f" where {where}" if where else ""), hint="nothing to edit")
    text = description or f"transform {len(rows)} key(s) with {label}" + (f" where {where}" if where else "")
    return RepairPlan(_explicit(operator, store, tuple(rows), text), "transform", where, src.description, None,
                      tuple(rows), f"transformed by {label}")


def load_transform(ref: str) -> Transform:
    """The function `module:function` names (importable where the edit runs)."""
    import importlib

    module, _, name = ref.partition(":")
    if not module or not name:
        raise UsageError(f"transform {ref!r} is not module:function", hint="e.g. fixes.orders:cap_totals")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"transform {ref!r} cannot be loaded: {exc}",
                         hint="put its module on PYTHONPATH (it runs where the edit runs)") from None
    if not callable(fn):
        raise UsageError(f"transform {ref!r} is not a function", hint="name a function of (key, value)")
    return fn  # type: ignore[no-any-return]


def _new_value(out: Any, old: dict[str, Any] | list[Any], label: str) -> dict[str, Any] | list[Any]:
    """A function's answer as a whole value: a dict of some columns patches the old value."""
    if isinstance(out, dict) and isinstance(old, dict):
        unknown = sorted(set(out) - set(old))
        if unknown:
            raise UsageError(f"{label} returned a column the state does not have: {unknown[0]!r}",
                             hint=f"its columns: {', '.join(old)}")
        return {**old, **out}
    if isinstance(out, (list, tuple)) and len(out) == len(old):
        return list(out) if isinstance(old, list) else dict(zip(old, out, strict=True))
    raise UsageError(f"{label} returned {type(out).__name__} {str(out)[:60]!r}, not a value of the state",
                     hint="return a dict of columns (all or some), a list of them in order, or None to delete")


def _explicit(operator: int | str, store: str, rows: tuple[dict[str, Any], ...], description: str) -> EditSpec:
    deletes = tuple(r["key"] for r in rows if r["after"] is None)
    sets = tuple((r["key"], r["after"]) for r in rows if r["after"] is not None)
    return EditSpec((StoreEdit(operator, store, deletes, sets),), description)


def stored_values(src: StateSource, operator: int | str, store: str,
                  keys: Sequence[Any]) -> list[list[Any] | None]:
    """Each key's value in `src`, its columns in order (None: not there), reading only the
    keys' partitions."""
    _, schema = store_schema(src, operator, store)
    changes = compile_changes(src, EditSpec((StoreEdit(operator, store, tuple(keys), ()),), "lookup"))
    base = 0 if provider_of(src.conf, src.description) == "hdfs" else len(rk.VERSION)
    return [None if raw is None else decode_row_values(raw[base:], schema.value)
            for raw in current_values(src, changes)]


def _named(values: list[Any], schema: StructType) -> dict[str, Any] | list[Any]:
    """Columns by name, for people; in order where two share a name (Spark's window keys)."""
    names = schema.names
    return dict(zip(names, values, strict=True)) if len(set(names)) == len(names) else values


def edit_json(value: Any) -> Any:
    """A decoded key or value as an edit's JSON takes it back (engine/lookup/encodings/
    keytext.py `coerce`): bytes as `base64:...`, exact decimals and times as text."""
    if isinstance(value, (bytes, bytearray)):
        return "base64:" + base64.b64encode(bytes(value)).decode()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise UnsupportedCheckpointError("a repair plan cannot name a map with non-text keys as JSON",
                                             hint="write the edit by hand for this state")
        return {k: edit_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [edit_json(v) for v in value]
    if isinstance(value, (decimal.Decimal, dt.date, dt.datetime, dt.timedelta)):
        return to_jsonable(value)
    return value


def _cell(value: Any, width: int = 120) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    text = text if len(text) <= width else text[:width - 3] + "..."
    return text.replace("|", "\\|")
