"""The rollback of the rescale and repair DAGs (streams.start.put_back) on a stopped stream's
checkpoint: after an edit put in place, the pinned snapshot is restored over it and the
state is exactly what it was; without a pin nothing is restored; a stream that did not run
before is not started."""

from __future__ import annotations

import logging
from pathlib import Path

from airflow_provider_streamstate.engine.edit.changes import EditSpec
from airflow_provider_streamstate.engine.edit.repair import edit_stream
from airflow_provider_streamstate.engine.lookup.digest import state_digest
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.streams.start import put_back
from tests.edits import work_copy
from tests.goldens import goldens


def test_the_pinned_snapshot_is_restored_over_an_edited_checkpoint_and_nothing_is_started(tmp_path: Path) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    spec = StreamSpec(name="orders", checkpoint=work, store=f"file://{tmp_path / 'store'}")
    before = state_digest(work)
    key = g.state().rows[0].key_input
    done = edit_stream(open_store(spec.store), "orders", work, EditSpec.from_json({"delete": [key]}), apply=True)
    assert state_digest(work).same_entries(before) != []

    out = put_back(spec, done.pinned, start=False, requested_by="test rollback", log=logging.getLogger("test"))
    assert out == {"restored": done.pinned, "started": False}
    after = state_digest(work)
    assert after.batch_id == before.batch_id and after.same_entries(before) == []


def test_without_a_pin_the_checkpoint_is_left_as_it_is(tmp_path: Path) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    work = work_copy(g, tmp_path)
    spec = StreamSpec(name="orders", checkpoint=work, store=f"file://{tmp_path / 'store'}")
    files = sorted(str(p) for p in Path(work).rglob("*"))
    assert put_back(spec, None, start=False, requested_by="test", log=logging.getLogger("test")) == {
        "restored": None, "started": False}
    assert sorted(str(p) for p in Path(work).rglob("*")) == files
