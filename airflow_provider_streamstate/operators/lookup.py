"""Check that keys of a stream's state hold what they should, as a task, without Spark: a
gate before a deploy ("account a-17 still holds 120"), or after a restore. Thin over
engine/lookup: each key is looked up in its partition of a snapshot (or of the live
checkpoint) in milliseconds; the task fails, without retry, naming every check that did not
hold. Nothing heavy is imported when the DAG is parsed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.links.streams_ui import SnapshotLink
from airflow_provider_streamstate.operators.base import StreamTask
from airflow_provider_streamstate.utils.task_errors import engine_errors

CHECK_FIELDS = ("key", "value", "where", "absent", "operator", "state_var", "join_side", "store_name")
SHOWN_VALUE_CHARS = 300  # of a value that did not hold, in the XCom and the failure line


class StateKeyCheckOperator(StreamTask):
    """Look keys up in a stream's state and fail when one does not hold what it should.

    Each check is a dict: `key` (as `lookup_key` takes it, or text: `account=a-17,region=eu`)
    and one of `value` (the fields given must be equal; the value's other fields are not
    compared; `null`: the key must be absent), `where` (a condition such as `total > 100`,
    engine/lookup/predicate.py) or `absent: true`; with none of them the key must be
    present. A check may name its own `operator`, `state_var`, `join_side`, `store_name`.
    Keys are read from `snapshot` in the stream's store or, with `checkpoint=True`, from the
    stream's checkpoint at its newest committed batch (read-only). Every check runs; the
    task then fails (no retry) with the failed checks in one line, after recording its
    result, so the Snapshot link works on a failed gate too. Returns `{"stream", "store",
    "snapshot_id", "batch_id", "source", "checked", "passed", "failed": [{"key", "why"}],
    "results": [{"key", "ok", "found", "partition"}]}`.

    :param checks: the checks (a list of dicts, or its JSON). (templated)
    :param snapshot: a snapshot id, `latest` or `latest-good:<suite>`. (templated)
    :param checkpoint: read the stream's live checkpoint instead of a snapshot.
    :param operator: the stateful operator's id or name for checks that name none (default 0). (templated)
    :param state_var: transformWithState: the state variable (or `$timers`) for checks that name none. (templated)
    :param join_side: `left` or `right` of a stream-stream join, for checks that name none. (templated)
    :param store_name: one named state store of the operator, for checks that name none. (templated)
    """

    template_fields: Sequence[str] = ("stream", "checks", "snapshot", "operator", "state_var", "join_side",
                                      "store_name")
    operator_extra_links = (SnapshotLink(),)

    def __init__(
        self, *, checks: list[dict[str, Any]] | str, snapshot: str = "latest", checkpoint: bool = False,
        operator: int | str = 0, state_var: str | None = None, join_side: str | None = None,
        store_name: str | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.checks = checks
        self.snapshot = snapshot
        self.checkpoint_mode = checkpoint
        self.operator = operator
        self.state_var = state_var
        self.join_side = join_side
        self.store_name = store_name

    def _checks(self) -> list[dict[str, Any]]:
        checks = self.checks
        if isinstance(checks, str):
            try:
                checks = json.loads(checks)
            except ValueError:
                raise UsageError("checks is not JSON", hint='give a list of {"key": ..., "value": ...}') from None
        if not isinstance(checks, list) or not checks or not all(isinstance(c, dict) for c in checks):
            raise UsageError("checks must be a non-empty list of dicts",
                             hint='e.g. [{"key": {"account": "a-17"}, "value": {"sum": 120}}]')
        for i, c in enumerate(checks):
            unknown = sorted(set(c) - set(CHECK_FIELDS))
            if unknown or "key" not in c:
                raise UsageError(f"check {i + 1} {'has no key' if 'key' not in c else f'has unknown field {unknown[0]!r}'}",
                                 hint=f"a check's fields: {', '.join(CHECK_FIELDS)}")
            if sum(f in c for f in ("value", "where", "absent")) > 1:
                raise UsageError(f"check {i + 1} gives more than one of value, where, absent", hint="give one")
        return checks

    def _source(self) -> Any:
        from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
        from airflow_provider_streamstate.engine.lookup import CheckpointSource, SnapshotSource

        spec = self.spec
        if self.checkpoint_mode:
            return CheckpointSource(spec.checkpoint, reader=CheckpointReader(self.checkpoint(spec.checkpoint)))
        return SnapshotSource(self.hook.store, spec.name, self.snapshot)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.lookup import lookup_key, parse_key_text

        spec = self.spec
        with engine_errors():
            checks = self._checks()
            source = self._source()
            self.log.info("checking %d key(s) of %s in %s", len(checks), spec.name, source.description)
            results, failed = [], []
            for c in checks:
                key = parse_key_text(c["key"]) if isinstance(c["key"], str) else c["key"]
                hit = lookup_key(source, key=key, operator=c.get("operator", self.operator),
                                 state_var=c.get("state_var", self.state_var or None),
                                 join_side=c.get("join_side", self.join_side or None),
                                 store_name=c.get("store_name", self.store_name or None))
                why = _verdict(c, hit)
                shown = json.dumps(hit.to_json()["key"], sort_keys=True)
                results.append({"key": shown, "ok": why is None, "found": hit.found, "partition": hit.partition})
                if why is not None:
                    failed.append({"key": shown, "why": why})
                    self.log.info("key %s: %s", shown, why)
        snapshot_id = None if self.checkpoint_mode else source.manifest.snapshot_id
        out = {"stream": spec.name, "store": spec.store, "snapshot_id": snapshot_id, "batch_id": source.batch_id,
               "source": source.description, "checked": len(checks), "passed": len(checks) - len(failed),
               "failed": failed, "results": results}
        self.log.info("%d of %d key check(s) held in %s", out["passed"], len(checks), source.description)
        if failed:
            context["ti"].xcom_push(key="return_value", value=out)  # the result (and the link) of a failed gate
            raise AirflowFailException(
                f"{len(failed)} of {len(checks)} key check(s) failed in {source.description}: "
                + "; ".join(f"{f['key']}: {f['why']}" for f in failed[:10])
                + (f"; and {len(failed) - 10} more" if len(failed) > 10 else ""))
        return out


def _verdict(check: dict[str, Any], hit: Any) -> str | None:
    """None when the check holds, else why not (one short clause)."""
    from airflow_provider_streamstate.engine.lookup import parse_predicate
    from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable
    from airflow_provider_streamstate.engine.lookup.predicate import values_match

    got = json.dumps(to_jsonable(hit.value), sort_keys=True, default=str)
    got = got if len(got) <= SHOWN_VALUE_CHARS else got[:SHOWN_VALUE_CHARS] + "..."
    if check.get("absent") or ("value" in check and check["value"] is None):
        return None if not hit.found else f"expected absent, holds {got}"
    if not hit.found:
        return "expected present, is absent"
    if "where" in check:
        return None if parse_predicate(str(check["where"]))(hit) else f"`{check['where']}` does not hold for {got}"
    if "value" in check and not values_match(check["value"], hit.value):
        return f"expected {json.dumps(check['value'], sort_keys=True, default=str)}, holds {got}"
    return None
