"""StateEditOperator run as a task runs it (execute), on a golden checkpoint's work copy:
a transform given as a function is planned and dry-run, an edit is written as a clone with
its labels, and an operator given two of an edit, a transform and a migration (or none) is
refused when the DAG is parsed. StateBootstrapOperator writes a table of a golden's state
(a file on the worker, or a URL a checkpoint filesystem reads) into the stream's empty
checkpoint, and refuses one that is not empty in one line, without retries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lookup import lookup_key
from airflow_provider_streamstate.engine.lookup.digest import state_digest
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.operators.edit import StateBootstrapOperator, StateEditOperator
from airflow_provider_streamstate.spec import StreamSpec
from tests.edits import work_copy
from tests.goldens import golden
from tests.unit.test_edit_bootstrap import table_of

CASE = "small_aggregation_hdfs"


@pytest.fixture
def spec(tmp_path: Path) -> StreamSpec:
    return StreamSpec(name="orders", checkpoint=work_copy(golden(CASE), tmp_path), store=str(tmp_path / "store"))


def test_a_transform_function_is_planned_and_dry_run_with_nothing_written(spec: StreamSpec) -> None:
    g = golden(CASE)
    (field,) = g.state().types["value"].names
    rows = g.state().rows
    top = max(r.value[0] for r in rows)
    n = CheckpointReader(spec.checkpoint).resolve_batch(None)

    def drop_top(key: dict, value: dict) -> dict | None:
        return None if value[field] == top else value

    task = StateEditOperator(task_id="edit", stream=spec.to_dict(), transform=drop_top, apply=False)
    out = task.execute({})
    assert out["dry_run"] and out["preview"]["changed"] == 1 and out["description"] == "transform 1 key(s) with drop_top"
    assert CheckpointReader(spec.checkpoint).resolve_batch(None) == n


def test_an_edit_written_as_a_clone_is_labelled_with_who_asked(spec: StreamSpec, tmp_path: Path) -> None:
    key = golden(CASE).state().rows[0].key_input
    # spark_check as a template renders it where a DAG does not render native objects: text.
    task = StateEditOperator(task_id="edit", stream=spec.to_dict(), edit={"delete": [key]}, spark_check="False",
                             target=str(tmp_path / "clone"), clone_name="orders-fixed", description="a bot's key",
                             requested_by="oncall")
    out = task.execute({})
    assert not out["in_place"] and out["checkpoint"] == str(tmp_path / "clone") and out["spark"] is None
    assert not lookup_key(str(tmp_path / "clone"), key=key).found and lookup_key(spec.checkpoint, key=key).found
    labels = get_snapshot(open_store(spec.store), "orders-fixed", out["edited_snapshot"]).labels
    assert (labels["edit"], labels["edited-by"], labels["edited-from"]) == ("a bot's key", "oncall",
                                                                            out["source_snapshot"])


@pytest.mark.parametrize("kwargs", [{}, {"edit": {"delete": [1]}, "transform": "fixes:cap"},
                                    {"transform": "fixes:cap", "migrate_to": "/v2"}])
def test_an_operator_needs_exactly_one_of_edit_transform_and_migrate_to(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="exactly one of edit, transform and migrate_to"):
        StateEditOperator(task_id="edit", stream={"name": "s", "checkpoint": "/c", "store": "/s"}, **kwargs)


@pytest.mark.parametrize("as_url", [False, True], ids=["path", "url"])
def test_the_bootstrap_operator_writes_a_tables_state_into_the_streams_empty_checkpoint(
        as_url: bool, tmp_path: Path) -> None:
    g = golden(CASE)
    rows = table_of(g.checkpoint)
    (tmp_path / "table.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = (tmp_path / "table.jsonl").as_uri() if as_url else str(tmp_path / "table.jsonl")
    spec = StreamSpec(name="moved", checkpoint=str(tmp_path / "new"), store=str(tmp_path / "store"))
    task = StateBootstrapOperator(task_id="bootstrap", stream=spec.to_dict(), skeleton=g.checkpoint, table=table,
                                  spark_check=False)
    out = task.execute({})
    assert out["keys"] == len(rows) and out["checkpoint"] == spec.checkpoint and out["spark"] is None
    assert state_digest(spec.checkpoint, 0).same_entries(state_digest(g.checkpoint)) == []
    assert CheckpointReader(spec.checkpoint).committed_batches() == [0]


def test_the_bootstrap_operator_refuses_a_checkpoint_that_is_not_empty_in_one_line(spec: StreamSpec,
                                                                                    tmp_path: Path) -> None:
    g = golden(CASE)
    (tmp_path / "table.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table_of(g.checkpoint)))
    before = sorted(p.name for p in Path(spec.checkpoint).rglob("*"))
    task = StateBootstrapOperator(task_id="bootstrap", stream=spec.to_dict(), skeleton=g.checkpoint,
                                  table=str(tmp_path / "table.jsonl"))
    with pytest.raises(AirflowFailException) as refused:
        task.execute({})
    message = str(refused.value)
    assert "is not empty: a bootstrap writes a new checkpoint" in message and "\n" not in message
    assert sorted(p.name for p in Path(spec.checkpoint).rglob("*")) == before
