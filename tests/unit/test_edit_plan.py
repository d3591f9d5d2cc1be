"""A repair planned from the damage (engine/edit/plan.py) on golden checkpoints real Spark
wrote: the keys a condition selects in the bad batch, restored to their values in an earlier
(good) batch or deleted; the plan's explicit edit, applied, leaves exactly those values, and
every type a state holds survives the plan's JSON unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.edit.batch import write_edit_batch
from airflow_provider_streamstate.engine.edit.changes import EditSpec, compile_changes
from airflow_provider_streamstate.engine.edit.plan import plan_repair, plan_transform, stored_values
from airflow_provider_streamstate.engine.edit.preview import current_values
from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource
from tests.edits import work_copy
from tests.goldens import Golden, goldens

AGGREGATIONS = [pytest.param(g, id=f"spark-{g.line}-{g.case}")
                for case in ("small_aggregation_hdfs", "small_aggregation_rocksdb_changelog")
                for g in goldens(case) if g.line in ("4.1", "4.3")]


def _fields(g: Golden) -> tuple[str, str]:
    (key,) = g.state().types["key"].names
    (value,) = g.state().types["value"].names
    return key, value


@pytest.mark.parametrize("g", [*AGGREGATIONS, *[pytest.param(g, id=f"spark-{g.line}-{g.case}")
                                                for g in goldens("windowed_aggregation_hdfs") if g.line == "4.1"]])
def test_selected_keys_are_restored_to_their_good_values_and_only_they(g: Golden, tmp_path: Path) -> None:
    """Keys absent from the good batch (windows opened since) are deleted; keys named in
    order where two key columns share a name (a window's grouping expressions)."""
    work = work_copy(g, tmp_path)
    value_field = g.state().types["value"].names[0]
    bad = CheckpointSource(work)
    good = CheckpointSource(g.checkpoint, 4 if g.case.startswith("windowed") else 2)
    rows = g.state().rows
    limit = sorted(r.value[0] for r in rows)[len(rows) // 2]
    where = f"{value_field} > {limit}"
    plan = plan_repair(bad, where, good=good)

    selected = sorted((r for r in rows if r.value[0] > limit), key=lambda r: str(r.key))
    keys = [r.key_input for r in selected]
    assert len(plan.rows) == len(selected) and all(r["before"][0 if isinstance(r["before"], list) else value_field]
                                                   > limit for r in plan.rows)
    at_good = stored_values(good, 0, "default", keys)
    assert any(v is not None for v in at_good)
    planned = compile_changes(bad, EditSpec.from_json(plan.edit.to_json()["edits"]))
    assert sorted(c.key_bytes for c in planned) == sorted(
        c.key_bytes for c in compile_changes(bad, EditSpec.from_json({"delete": keys})))
    assert plan.edit.description == f"restore {len(selected)} key(s) where {where} from {good.description}"
    # The plan's edit goes through JSON (XCom, a file) and applies as planned.
    edit = EditSpec.from_json(json.dumps(plan.edit.to_json()["edits"]), plan.edit.description)
    write_edit_batch(open_checkpoint_fs(work), bad.batch_id, compile_changes(bad, edit))
    after = CheckpointSource(work, bad.batch_id + 1)
    assert stored_values(after, 0, "default", keys) == at_good
    others = [r.key_input for r in rows if r.value[0] <= limit]
    assert stored_values(after, 0, "default", others) == stored_values(bad, 0, "default", others)
    if g.case.startswith("windowed"):
        assert any(v is None for v in at_good), "windows opened after the good batch are deleted"


@pytest.mark.parametrize("g", AGGREGATIONS[:1])
def test_a_delete_plan_names_every_selected_key_and_shows_it_for_approval(g: Golden, tmp_path: Path) -> None:
    key_field, value_field = _fields(g)
    bad = CheckpointSource(g.checkpoint)
    top = max(r.value[0] for r in g.state().rows)
    plan = plan_repair(bad, f"{value_field} >= {top}", action="delete")
    assert [r["after"] for r in plan.rows] == [None] and plan.edit.edits[0].delete == (plan.rows[0]["key"],)
    assert plan.rows[0]["key"] == {key_field: plan.rows[0]["key"][key_field]}
    text = plan.markdown()
    assert f"1 key(s) of {bad.description} where `{value_field} >= {top}`, deleted." in text
    assert f'| {{"{key_field}": {plan.rows[0]["key"][key_field]}}} | {{"{value_field}": {top}}} | *deleted* |' in text


def test_every_type_a_state_holds_survives_the_plans_json(tmp_path: Path) -> None:
    """A plan restoring every key of the typed golden to its own value is an edit that
    writes every value byte for byte as it is stored (timestamps, decimals, binary,
    structs, arrays and maps included)."""
    (g,) = [g for g in goldens("typed_values_rocksdb_changelog") if g.line == "4.1"]
    src = CheckpointSource(g.checkpoint)
    plan = plan_repair(src, "key.k >= 0", good=src)
    assert len(plan.rows) == len(g.state().rows) and all(r["after"] == r["before"] for r in plan.rows)
    edit = EditSpec.from_json(json.loads(json.dumps(plan.edit.to_json()["edits"])))
    changes = compile_changes(src, edit)
    assert [c.value_bytes for c in changes] == current_values(src, changes)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"where": "count > 1", "action": "restore"}, "needs the good state"),
    ({"where": "count > 1", "action": "undo"}, "unknown repair action 'undo'"),
])
def test_a_plan_that_cannot_be_made_is_a_usage_error(kwargs: dict[str, str], words: str) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    with pytest.raises(UsageError, match=words):
        plan_repair(CheckpointSource(g.checkpoint), kwargs["where"], action=kwargs["action"])


def test_a_condition_that_selects_nothing_says_so() -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    _, value_field = _fields(g)
    with pytest.raises(UsageError, match="satisfies"):
        plan_repair(CheckpointSource(g.checkpoint), f"{value_field} < -1", action="delete")


@pytest.mark.parametrize("g", AGGREGATIONS)
def test_a_transform_patches_deletes_or_leaves_each_key_as_its_function_says(g: Golden, tmp_path: Path) -> None:
    work = work_copy(g, tmp_path)
    key_field, value_field = _fields(g)
    src = CheckpointSource(work)
    rows = g.state().rows
    values = sorted(r.value[0] for r in rows)
    low, high = values[len(values) // 4], values[3 * len(values) // 4]

    def cap(key: dict, value: dict) -> dict | None:
        if value[value_field] < low:
            return None  # delete
        if value[value_field] > high:
            return {value_field: high}  # a patch of one column
        return value  # unchanged

    plan = plan_transform(src, cap)
    deleted = sorted(r.key[0] for r in rows if r.value[0] < low)
    capped = sorted(r.key[0] for r in rows if r.value[0] > high)
    assert sorted(r["key"][key_field] for r in plan.rows if r["after"] is None) == deleted
    assert sorted(r["key"][key_field] for r in plan.rows if r["after"] is not None) == capped
    assert all(r["after"] == {value_field: high} for r in plan.rows if r["after"] is not None)
    assert plan.edit.description == f"transform {len(deleted) + len(capped)} key(s) with cap"
    assert f"key(s) of {src.description}, transformed by cap." in plan.markdown()

    write_edit_batch(open_checkpoint_fs(work), src.batch_id, compile_changes(src, plan.edit))
    after = CheckpointSource(work, src.batch_id + 1)
    got = stored_values(after, 0, "default", [r.key_input for r in rows])
    assert got == [None if r.value[0] < low else [min(r.value[0], high)] for r in rows]

    # With a condition, only the keys it selects are given to the function.
    seen: list[int] = []
    plan = plan_transform(src, lambda k, v: seen.append(v[value_field]) or None, where=f"{value_field} > {high}")
    assert sorted(seen) == sorted(r.value[0] for r in rows if r.value[0] > high) == \
        sorted(r["before"][value_field] for r in plan.rows)


@pytest.mark.parametrize(("fn", "words"), [
    (lambda k, v: 1 / 0, "failed on key .*ZeroDivisionError"),
    (lambda k, v: {"nope": 1}, "a column the state does not have: 'nope'"),
    (lambda k, v: "text", "returned str 'text', not a value of the state"),
    (lambda k, v: v, "changes no key"),
])
def test_a_transform_that_cannot_be_applied_is_a_usage_error_naming_why(fn, words: str) -> None:  # noqa: ANN001
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    with pytest.raises(UsageError, match=words):
        plan_transform(CheckpointSource(g.checkpoint), fn, name="fix")


def test_a_restore_from_a_snapshot_before_a_migration_is_refused(tmp_path: Path) -> None:
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.edit.migrate import migration_to
    from airflow_provider_streamstate.engine.edit.repair import edit_stream
    from tests.edits import schema_file, struct_json

    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    target = tmp_path / "v2" / "state" / "0" / "0" / "_metadata" / "schema"
    target.parent.mkdir(parents=True)
    target.write_bytes(schema_file(struct_json(("_groupingexpression", "long", True)),
                                   struct_json(("sum", "long", True), ("max", "long", True))))
    edit_stream(LocalStore(tmp_path / "store", fsync=False), "orders", work, migration_to(str(tmp_path / "v2")),
                apply=True)
    with pytest.raises(UsageError, match="the state's schema changed between"):
        plan_repair(CheckpointSource(work), "sum > 0", good=CheckpointSource(g.checkpoint))


def test_a_transform_that_changes_its_arguments_in_place_is_seen(tmp_path: Path) -> None:
    (g,) = [g for g in goldens("typed_values_rocksdb_changelog") if g.line == "4.1"]
    src = CheckpointSource(g.checkpoint)

    def bump(key: dict, value: list) -> list:
        value[36]["a"] += 1  # a map column (never null here), changed in place
        return value

    plan = plan_transform(src, bump)
    assert len(plan.rows) == len(g.state().rows)
    assert all(r["after"][36]["a"] == r["before"][36]["a"] + 1 for r in plan.rows)
