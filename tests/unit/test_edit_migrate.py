"""Migrating a store's state to a new query version's value schema (engine/edit/migrate.py)
on golden checkpoints real Spark wrote: every key gets its value in the new schema (kept,
widened, defaulted or dropped by column name), the target's schema file replaces the
store's, the edit's verification proves it; what cannot be carried over is refused in one
line with nothing written."""

from __future__ import annotations

import decimal
import re
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import hadoop_crc
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError, UsageError
from airflow_provider_streamstate.engine.edit.changes import matching_entries
from airflow_provider_streamstate.engine.edit.migrate import migration_to, value_conversion, widens
from airflow_provider_streamstate.engine.edit.plan import stored_values
from airflow_provider_streamstate.engine.edit.repair import edit_stream
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup.encodings.types import (
    DecimalType,
    StructField,
    StructType,
    atomic,
)
from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource
from tests.edits import schema_file, struct_json, work_copy
from tests.goldens import Golden, goldens

KEY = ("_groupingexpression", "long", True)
CASES = [pytest.param(g, id=f"spark-{g.line}-{g.case}")
         for case in ("small_aggregation_hdfs", "small_aggregation_rocksdb_changelog")
         for g in goldens(case) if g.line in ("4.1", "4.3")]


def new_version(root: Path, value: dict, key: tuple = KEY) -> str:
    """A checkpoint holding only the schema file a new query version would write."""
    path = root / "state" / "0" / "0" / "_metadata" / "schema"
    path.parent.mkdir(parents=True)
    path.write_bytes(schema_file(struct_json(key), value))
    return str(root)


@pytest.mark.parametrize("g", CASES)
@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "clone"])
def test_every_key_is_rewritten_in_the_new_schema_and_the_schema_file_replaced(
        g: Golden, in_place: bool, tmp_path: Path) -> None:
    work = work_copy(g, tmp_path)
    n = CheckpointReader(work).resolve_batch(None)
    target = new_version(tmp_path / "v2", struct_json(("sum", "long", True), ("max", "long", True),
                                                      ("n", "integer", False)))
    m = migration_to(target, defaults={"n": 7})
    store = LocalStore(tmp_path / "store", fsync=False)
    clone = None if in_place else str(tmp_path / "clone")
    done = edit_stream(store, "orders", work, m, apply=True, target=clone)
    assert done.edit_batch == n + 1 and done.preview.changed == len(g.state().rows)
    migrated = clone or work
    assert (Path(migrated) / "state/0/0/_metadata/schema").read_bytes() == m.schema_file
    # Its Hadoop checksum sidecar follows: Hadoop's local filesystem refuses a file that does not match it.
    assert (Path(migrated) / "state/0/0/_metadata/.schema.crc").read_bytes() == hadoop_crc(m.schema_file)
    if g.case.endswith("_hdfs"):  # the whole new state as a snapshot: Spark loads none of the old-format files
        assert all((Path(migrated) / f"state/0/{p}/{n + 2}.snapshot").is_file() for p in range(4))
        assert not list(Path(migrated).glob(f"state/0/*/{n + 2}.delta"))
    keys = [r.key_input for r in g.state().rows]
    assert stored_values(CheckpointSource(migrated), 0, "default", keys) == [[r.value[0], None, 7]
                                                                              for r in g.state().rows]
    if not in_place:
        assert stored_values(CheckpointSource(work), 0, "default", keys) == [[r.value[0]] for r in g.state().rows]
    # The batches before the migration are read in the schema they were written in, kept beside the new one.
    before = Path(migrated) / f"state/0/0/_metadata/schema.before-{n + 1}"
    assert before.read_bytes() == (Path(g.checkpoint) / "state/0/0/_metadata/schema").read_bytes()
    assert stored_values(CheckpointSource(migrated, n), 0, "default", keys) == [[r.value[0]] for r in g.state().rows]


def test_a_dry_run_counts_every_key_and_writes_nothing(tmp_path: Path) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    before = sorted(p.name for p in Path(work).rglob("*"))
    m = migration_to(new_version(tmp_path / "v2", struct_json(("sum", "long", True), ("max", "long", True))))
    dry = edit_stream(LocalStore(tmp_path / "store", fsync=False), "orders", work, m)
    assert dry.dry_run and dry.preview.changed == len(g.state().rows)
    assert sorted(p.name for p in Path(work).rglob("*")) == before


def test_columns_are_kept_widened_defaulted_or_dropped_by_name() -> None:
    old = StructType("struct", (StructField("c", atomic("integer")), StructField("gone", atomic("string")),
                                StructField("d", DecimalType("decimal", 5, 2)), StructField("f", atomic("float"))))
    new = StructType("struct", (StructField("f", atomic("double")), StructField("c", atomic("long")),
                                StructField("d", DecimalType("decimal", 10, 3)),
                                StructField("tag", atomic("string"), nullable=False),
                                StructField("maybe", atomic("long"))))
    convert = value_conversion(old, new, {"tag": "eu"})
    out = convert({"c": 3, "gone": "x", "d": decimal.Decimal("1.25"), "f": 0.5})
    assert out == {"f": 0.5, "c": 3, "d": decimal.Decimal("1.25"), "tag": "eu", "maybe": None}
    assert isinstance(out["f"], float)


@pytest.mark.parametrize(("old", "new", "ok"), [
    ("byte", "short", True), ("short", "long", True), ("integer", "double", True), ("float", "double", True),
    ("long", "integer", False), ("long", "double", False), ("integer", "float", False), ("double", "float", False),
    ("string", "long", False),
])
def test_only_exact_widenings_are_widenings(old: str, new: str, ok: bool) -> None:
    assert widens(atomic(old), atomic(new)) is ok


def test_decimals_widen_only_with_room_on_both_sides_of_the_point() -> None:
    d = DecimalType("decimal", 5, 2)
    assert widens(d, DecimalType("decimal", 7, 3)) and not widens(d, DecimalType("decimal", 5, 3))
    assert not widens(d, DecimalType("decimal", 6, 1))


@pytest.mark.parametrize(("value", "defaults", "key", "words"), [
    (struct_json(("sum", "integer", True)), {}, KEY, "not a widening"),
    (struct_json(("sum", "long", True), ("n", "long", False)), {}, KEY, "column n is new and cannot be null"),
    (struct_json(("sum", "long", True)), {"nope": 1}, KEY, "a default is given for 'nope'"),
    (struct_json(("sum", "long", True)), {}, ("k", "string", True), "a key change is another grouping"),
])
def test_what_cannot_be_carried_over_is_refused_with_nothing_written(
        value: dict, defaults: dict, key: tuple, words: str, tmp_path: Path) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    before = sorted(str(p) for p in Path(work).rglob("*"))
    m = migration_to(new_version(tmp_path / "v2", value, key), defaults=defaults)
    with pytest.raises(UsageError, match=words):
        edit_stream(LocalStore(tmp_path / "store", fsync=False), "orders", work, m, apply=True)
    assert sorted(str(p) for p in Path(work).rglob("*")) == before


def test_a_checkpoint_without_the_schema_file_is_a_usage_error_saying_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist: no state schema of operator 0") as err:
        migration_to(str(tmp_path / "empty"))
    assert "run the new query version once" in (err.value.hint or "")


def test_transform_with_state_is_refused(tmp_path: Path) -> None:
    (g,) = [g for g in goldens("transform_with_state_rocksdb_changelog") if g.line == "4.1"]
    m = migration_to(new_version(tmp_path / "v2", struct_json(("sum", "long", True))))
    with pytest.raises(UnsupportedCheckpointError, match="keeps transformWithState state"):
        edit_stream(LocalStore(tmp_path / "store", fsync=False), "t", g.checkpoint, m)


@pytest.mark.parametrize(("column", "default", "words"), [
    (("n", "byte", False), None, "the default of n is null"),
    (("n", "byte", False), 1.5, "does not fit a byte exactly"),
    (("n", "byte", False), True, "is not a byte"),
    (("n", "byte", False), 300, "is not a byte"),
    (("n", "byte", False), [1], "is not a byte"),
    (("sum", "long", False), None, "may be null in the state and cannot be in the new version"),
])
def test_a_default_or_a_nullability_that_does_not_fit_is_refused_in_one_line(
        column: tuple, default: object, words: str, tmp_path: Path) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    fields = [("sum", "long", True), column] if column[0] != "sum" else [column]
    defaults = {} if column[0] == "sum" else {column[0]: default}
    m = migration_to(new_version(tmp_path / "v2", struct_json(*fields)), defaults=defaults)
    with pytest.raises(UsageError, match=words) as err:
        edit_stream(LocalStore(tmp_path / "store", fsync=False), "orders", work, m, apply=True)
    assert "\n" not in err.value.one_line()


def test_an_empty_store_still_takes_the_new_schema(tmp_path: Path) -> None:
    from airflow_provider_streamstate.engine.edit.changes import EditSpec

    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "store", fsync=False)
    edit_stream(store, "orders", work, EditSpec.from_json({"delete_where": "sum > -1000000000"}), apply=True)
    m = migration_to(new_version(tmp_path / "v2", struct_json(("sum", "long", True), ("max", "long", True))))
    done = edit_stream(store, "orders", work, m, apply=True)
    assert done.preview.changed == 0 and (Path(work) / "state/0/0/_metadata/schema").read_bytes() == m.schema_file


def test_sparks_reading_of_a_live_batch_from_before_a_migration_is_refused_in_one_line(tmp_path: Path) -> None:
    """Spark reads a store in its current schema file only (engine/state/reader.py's
    `checkpoint_state`): a batch written before the migration is refused, the ones after it
    are read; a second migration keeps each batch's schema apart."""
    from airflow_provider_streamstate.engine.state.reader import _refuse_before_migration

    (g,) = [g for g in goldens("small_aggregation_rocksdb_changelog") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    n = CheckpointReader(work).resolve_batch(None)
    store = LocalStore(tmp_path / "store", fsync=False)
    first = struct_json(("sum", "long", True), ("max", "long", True))
    edit_stream(store, "orders", work, migration_to(new_version(tmp_path / "v2", first)), apply=True)
    second = struct_json(("sum", "long", True), ("max", "long", True), ("n", "long", True))
    edit_stream(store, "orders", work, migration_to(new_version(tmp_path / "v3", second)), apply=True)
    reader = CheckpointReader(work)
    with pytest.raises(UsageError, match=f"migrated at batch {n + 1}: Spark would read it in the new schema") as err:
        _refuse_before_migration(reader, n, 0, "default", work)
    assert "\n" not in err.value.one_line()
    with pytest.raises(UsageError, match=f"migrated at batch {n + 2}"):
        _refuse_before_migration(reader, n + 1, 0, "default", work)
    _refuse_before_migration(reader, n + 2, 0, "default", work)  # the newest schema's own batch
    # A snapshot of a batch from before a migration would carry the new schema beside the old state.
    ids = store.list_snapshot_ids("orders")
    with pytest.raises(UsageError, match=f"batch {n + 1} of .* was written before its state was migrated"):
        create_snapshot(work, store, "orders", batch_id=n + 1, always=True)
    assert store.list_snapshot_ids("orders") == ids
    assert create_snapshot(work, store, "orders", batch_id=n + 2, always=True).manifest.batch_id == n + 2
    keys = [r.key_input for r in g.state().rows]
    rows = g.state().rows
    assert stored_values(CheckpointSource(work, n), 0, "default", keys) == [[r.value[0]] for r in rows]
    assert stored_values(CheckpointSource(work, n + 1), 0, "default", keys) == [[r.value[0], None] for r in rows]
    assert stored_values(CheckpointSource(work), 0, "default", keys) == [[r.value[0], None, None] for r in rows]


def test_the_operator_migrates_the_stopped_stream_in_place(tmp_path: Path) -> None:
    from airflow_provider_streamstate.operators.edit import StateEditOperator
    from airflow_provider_streamstate.spec import StreamSpec

    (g,) = [g for g in goldens("small_aggregation_rocksdb_changelog") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    target = new_version(tmp_path / "v2", struct_json(("sum", "long", True), ("n", "integer", False)))
    spec = StreamSpec(name="orders", checkpoint=work, store=str(tmp_path / "store"))
    out = StateEditOperator(task_id="migrate", stream=spec.to_dict(), migrate_to=target, defaults={"n": 0},
                            spark_check=False).execute({})
    assert out["in_place"] and out["preview"]["changed"] == len(g.state().rows) and out["pinned"]
    keys = [r.key_input for r in g.state().rows]
    assert stored_values(CheckpointSource(work), 0, "default", keys) == [[r.value[0], 0] for r in g.state().rows]


# Spark names aggregate buffers, not aliases: the golden query `agg(first(c1), first(c2), ...)`
# (19 columns) keeps 19 columns `first` and 19 `valueSet` in one store (its state schema file
# as Spark 4.1 wrote it), the engine's readers naming them first, first#2, ... first#19.
TYPED = "typed_values_rocksdb_changelog"


def typed_version(root: Path, g: Golden, *extra: tuple[str, str, bool]) -> tuple[str, list[str]]:
    """A new version of the golden's query keeping all its aggregates, and `extra` columns
    after them; the names of the state's value columns."""
    from airflow_provider_streamstate.engine.edit.changes import store_schema
    from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import field_names

    (reader,) = [r for r in g.record["readers"] if r["options"] == {"batchId": g.last_batch}]
    fields = {f["name"]: f["type"] for f in reader["schema"]["fields"]}
    value = {"type": "struct", "fields": [*fields["value"]["fields"], *struct_json(*extra)["fields"]]}
    path = root / "state" / "0" / "0" / "_metadata" / "schema"
    path.parent.mkdir(parents=True)
    path.write_bytes(schema_file(fields["key"], value))
    _, schema = store_schema(CheckpointSource(g.checkpoint), 0, "default")
    return str(root), field_names(schema.value)


def test_columns_of_one_buffer_name_unpaired_are_refused_naming_them_and_what_to_give(tmp_path: Path) -> None:
    (g,) = [g for g in goldens(TYPED) if g.line == "4.1"]
    target, names = typed_version(tmp_path / "v2", g, ("n", "long", True))
    assert names[:4] == ["first", "valueSet", "first#2", "valueSet#2"] and names[-1] == "valueSet#19"
    work = work_copy(g, tmp_path)
    before = sorted(str(p) for p in Path(work).rglob("*"))
    with pytest.raises(UsageError) as err:
        edit_stream(LocalStore(tmp_path / "store", fsync=False), "typed", work, migration_to(target), apply=True)
    line = err.value.one_line()
    assert "the state has first, first#2, ... first#19 (19) and the new version first, first#2, ... first#19 (19)" \
        in line and "cannot pair by name" in line and "\n" not in line
    assert "--pair first=first --pair first#2=first#2" in line and "--default first#19=" in line
    assert sorted(str(p) for p in Path(work).rglob("*")) == before


def test_columns_of_one_buffer_name_paired_by_position_are_carried_over_exactly(tmp_path: Path) -> None:
    (g,) = [g for g in goldens(TYPED) if g.line == "4.1"]
    target, names = typed_version(tmp_path / "v2", g, ("n", "long", True))
    work = work_copy(g, tmp_path)
    old = {tuple(k): tuple(v) for k, v in matching_entries(CheckpointSource(work), 0, "default", None)}
    pairs = {n: n for n in names if n.partition("#")[0] in ("first", "valueSet")}
    pairs["first#1"] = pairs.pop("first")  # `#1` names the first one too
    done = edit_stream(LocalStore(tmp_path / "store", fsync=False), "typed", work, migration_to(target, pairs=pairs),
                       apply=True)
    assert done.preview.changed == len(old) == len(g.state().rows)
    new = {tuple(k): tuple(v) for k, v in matching_entries(CheckpointSource(work), 0, "default", None)}
    assert new.keys() == old.keys()
    assert all(new[k] == (*old[k], None) for k in old)


@pytest.mark.parametrize(("old", "new", "pairs", "defaults", "words"), [
    # two sums in the state, one in the new version: which one was kept?
    ([("sum", "long"), ("sum", "long")], [("sum", "long")], {}, {}, "unpaired: sum)"),
    # an avg (sum, count) beside a sum: the new version's second sum has no source
    ([("sum", "long"), ("count", "long")], [("sum", "long"), ("count", "long"), ("sum", "long")], {}, {},
     "unpaired: sum, sum#2"),
    ([("sum", "long")], [("sum", "long"), ("sum", "long")], {"sum#3": "sum"}, {}, "a pair is given for 'sum#3'"),
    ([("sum", "long")], [("sum", "long"), ("sum", "long")], {"sum": "sum#2"}, {},
     "a pair's source is given for 'sum#2'"),
    ([("sum", "long")], [("sum", "long"), ("sum", "long")], {"sum": "sum"}, {"sum": 0}, "both a default and a pair"),
])
def test_a_pairing_that_is_ambiguous_or_wrong_is_refused_in_one_line(
        old: list, new: list, pairs: dict, defaults: dict, words: str) -> None:
    def struct(cols: list) -> StructType:
        return StructType("struct", tuple(StructField(n, atomic(t)) for n, t in cols))

    with pytest.raises(UsageError, match=re.escape(words)) as err:
        value_conversion(struct(old), struct(new), defaults, pairs)
    assert "\n" not in err.value.one_line()


def test_one_buffer_name_is_paired_as_given_defaulted_or_dropped_when_gone() -> None:
    def struct(*cols: str) -> StructType:
        return StructType("struct", tuple(StructField(n, atomic("long")) for n in cols))

    # avg(x) and sum(y) in the state; the new version keeps sum(y) first, then avg(x), and a new sum(z)
    convert = value_conversion(struct("sum", "count", "sum"), struct("sum", "sum", "count", "sum"), {"sum#3": 0},
                               {"sum": "sum#2", "sum#2": "sum", "count": "count"})
    assert convert({"sum": 10, "count": 2, "sum#2": 99}) == {"sum": 99, "sum#2": 10, "count": 2, "sum#3": 0}
    # two sums in the state, none in the new version: nothing to pair, both dropped
    assert value_conversion(struct("sum", "sum", "max"), struct("max"), {})({"sum": 1, "sum#2": 2, "max": 3}) == \
        {"max": 3}
    # one name once on each side is paired by name, whichever column it sums: a default starts it afresh
    assert value_conversion(struct("sum"), struct("sum"), {"sum": 0})({"sum": 5}) == {"sum": 0}
