"""`streamstate state edit` as a script sees it: a dry run by default that writes nothing and
prints what would change per partition; `--apply` (here verified without Spark:
`--no-spark-check`) puts the edit batch in place and says which snapshot holds it and what
is pinned; options that make no sense together are usage errors (exit 2, one line).
`streamstate state bootstrap` writes a CSV table of a golden's state into the spec's empty
checkpoint and says where the stream starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lookup import lookup_key
from airflow_provider_streamstate.spec import StreamSpec
from tests.edits import work_copy
from tests.goldens import golden


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def spec(tmp_path: Path) -> tuple[str, str]:
    ckpt = work_copy(golden("small_aggregation_hdfs"), tmp_path)
    return json.dumps(StreamSpec(name="orders", checkpoint=ckpt, store=str(tmp_path / "store")).to_dict()), ckpt


def test_a_dry_run_is_the_default_and_prints_the_counts_per_partition(spec, capsys) -> None:
    text, ckpt = spec
    key = golden("small_aggregation_hdfs").state().rows[0].key_input
    n = CheckpointReader(ckpt).resolve_batch(None)
    code, out, _ = run(capsys, "state", "edit", "--spec", text, "--edit", json.dumps({"delete": [key, [424242]]}))
    assert code == 0 and "would change 1 key(s) of orders" in out
    assert "1 removed, 0 replaced, 0 added" in out and "1 to delete not there" in out  # one partition or two
    assert "nothing was written" in out and CheckpointReader(ckpt).resolve_batch(None) == n


def test_apply_puts_the_edit_in_place_and_names_the_snapshot_and_the_pin(spec, capsys, tmp_path) -> None:
    text, ckpt = spec
    key = golden("small_aggregation_hdfs").state().rows[0].key_input
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps({"delete": [key]}))
    n = CheckpointReader(ckpt).resolve_batch(None)
    code, out, _ = run(capsys, "state", "edit", "--spec", text, "--edit", str(edit), "--apply", "--no-spark-check",
                       "--description", "a bot's key", "--json")
    r = json.loads(out)
    assert code == 0 and not r["dry_run"] and r["edit_batch"] == n + 1 and r["pinned"] == r["source_snapshot"]
    assert r["description"] == "a bot's key" and r["spark"] is None and r["edited_snapshot"]
    assert not lookup_key(ckpt, key=key).found and CheckpointReader(ckpt).resolve_batch(None) == n + 1


@pytest.mark.parametrize(("extra", "words"), [(["--target", "/tmp/x"], "--target and --clone-name write a clone"),
                                              (["--apply", "--clone-name", "c"], "--clone-name names a clone"),
                                              (["--edit", "not json"], "neither JSON nor a file")])
def test_options_that_cannot_go_together_are_usage_errors(spec, capsys, extra: list[str], words: str) -> None:
    text, _ = spec
    argv = ["state", "edit", "--spec", text, "--edit", '{"delete": [1]}', *extra]
    code, _, err = run(capsys, *argv)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_a_transform_named_as_module_function_is_planned_shown_and_applied(spec, capsys, tmp_path, monkeypatch) -> None:
    """`--transform` (a function of key and value, importable here) with `--where`: the dry
    run counts the keys it changes, --apply writes exactly its answers."""
    text, ckpt = spec
    g = golden("small_aggregation_hdfs")
    (field,) = g.state().types["value"].names
    rows = g.state().rows
    top = sorted(r.value[0] for r in rows)[-3]
    (tmp_path / "fixes_for_test.py").write_text(
        f"def halve(key, value):\n    return {{'{field}': value['{field}'] // 2}}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["state", "edit", "--spec", text, "--transform", "fixes_for_test:halve", "--where", f"{field} >= {top}"]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "would change 3 key(s) of orders (transform 3 key(s) with fixes_for_test:halve" in out
    code, out, _ = run(capsys, *argv, "--apply", "--no-spark-check", "--json")
    assert code == 0 and json.loads(out)["preview"]["changed"] == 3
    for r in rows:
        hit = lookup_key(ckpt, key=r.key_input)
        assert hit.value[field] == (r.value[0] // 2 if r.value[0] >= top else r.value[0])


@pytest.mark.parametrize(("argv", "words"), [
    (["--edit", '{"delete": [1]}', "--where", "count > 1"], "--where, --operator and --store-name select"),
    (["--transform", "no_such_module_here:fn"], "cannot be loaded"),
    (["--transform", "json"], "is not module:function"),
])
def test_a_transform_given_wrong_is_a_usage_error(spec, capsys, argv: list[str], words: str) -> None:
    text, _ = spec
    code, _, err = run(capsys, "state", "edit", "--spec", text, *argv)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def new_version(checkpoint: Path, *value: tuple[str, str, bool]) -> None:
    """A new query version's checkpoint: operator 0's schema, its key the golden's, its value `value`."""
    from tests.edits import schema_file, struct_json

    target = checkpoint / "state" / "0" / "0" / "_metadata" / "schema"
    target.parent.mkdir(parents=True)
    target.write_bytes(schema_file(struct_json(("_groupingexpression", "long", True)), struct_json(*value)))


def test_migrate_to_rewrites_every_key_into_the_new_versions_schema_with_defaults(spec, capsys, tmp_path) -> None:

    text, ckpt = spec
    g = golden("small_aggregation_hdfs")
    (field,) = g.state().types["value"].names
    new_version(tmp_path / "v2", (field, "long", True), ("n", "integer", False))
    argv = ["state", "edit", "--spec", text, "--migrate-to", str(tmp_path / "v2"), "--default", "n=3"]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and f"would change {len(g.state().rows)} key(s) of orders (migrate operator 0 (default)" in out
    code, out, _ = run(capsys, *argv, "--apply", "--no-spark-check", "--json")
    assert code == 0 and json.loads(out)["preview"]["changed"] == len(g.state().rows)
    row = g.state().rows[0]
    assert lookup_key(ckpt, key=row.key_input).value == {field: row.value[0], "n": 3}


def test_a_new_column_of_a_repeated_name_takes_the_state_column_pair_names(spec, capsys, tmp_path) -> None:

    text, ckpt = spec
    g = golden("small_aggregation_hdfs")
    (field,) = g.state().types["value"].names
    new_version(tmp_path / "v2", (field, "long", True), (field, "long", True))
    argv = ["state", "edit", "--spec", text, "--migrate-to", str(tmp_path / "v2"), "--apply", "--no-spark-check"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"unpaired: {field}, {field}#2" in err and len(err.strip().splitlines()) == 1
    code, _, _ = run(capsys, *argv, "--pair", f"{field}#2={field}", "--default", f"{field}=0")
    row = g.state().rows[0]
    assert code == 0 and lookup_key(ckpt, key=row.key_input).value == {field: 0, f"{field}#2": row.value[0]}


@pytest.mark.parametrize(("argv", "words"), [
    (["--migrate-to", "/nowhere", "--where", "count > 1"], "--where selects the keys --transform is given"),
    (["--edit", '{"delete": [1]}', "--default", "n=1"], "--default and --pair say where a migrated column's"),
    (["--edit", '{"delete": [1]}', "--pair", "sum#2=sum"], "--default and --pair say where a migrated column's"),
    (["--migrate-to", "/nowhere", "--default", "n"], "is not COL=VALUE"),
    (["--migrate-to", "/nowhere", "--pair", "sum"], "is not NEW=OLD"),
    (["--migrate-to", "/nowhere"], "does not exist: no state schema of operator 0"),
])
def test_a_migration_given_wrong_is_a_usage_error(spec, capsys, argv: list[str], words: str) -> None:
    text, _ = spec
    code, _, err = run(capsys, "state", "edit", "--spec", text, *argv)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_bootstrap_writes_a_csv_table_into_the_specs_empty_checkpoint_and_refuses_it_once_written(capsys, tmp_path) -> None:
    import csv

    from tests.unit.test_edit_bootstrap import table_of

    g = golden("small_aggregation_hdfs")
    rows = table_of(g.checkpoint)
    with (tmp_path / "table.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    text = json.dumps(StreamSpec(name="moved", checkpoint=str(tmp_path / "new"), store=str(tmp_path / "s")).to_dict())
    code, out, _ = run(capsys, "state", "bootstrap", "--spec", text, "--skeleton", g.checkpoint, "--table",
                       str(tmp_path / "table.csv"), "--no-spark-check")
    assert code == 0 and f"bootstrapped {tmp_path / 'new'}: {len(rows)} key(s) of operator 0 at batch 0" in out
    assert CheckpointReader(str(tmp_path / "new")).committed_batches() == [0]
    again = ["state", "bootstrap", "--spec", text, "--skeleton", g.checkpoint, "--table", str(tmp_path / "table.csv")]
    code, _, err = run(capsys, *again, "--no-spark-check")
    assert code == 2 and "is not empty: a bootstrap writes a new checkpoint" in err and len(err.splitlines()) == 1
    code, _, err = run(capsys, *again, "--offsets", "[{")
    assert code == 2 and "--offsets is not JSON" in err
