"""`streamstate state get` and `state history` as a script sees them: a key of a snapshot or
of the live checkpoint, a key's history and the first snapshot where a condition holds, one
JSON document with --json, and one line on stderr with exit 2 for what cannot be asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.state_files import Aggregation


@pytest.fixture
def stream(tmp_path: Path) -> tuple[Aggregation, LocalStore, list[str]]:
    agg = Aggregation(tmp_path / "ckpt")
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = []
    for changes in ({"a": 1, "b": 1}, {"b": 2}, {"a": 3}):
        agg.commit(changes)
        ids.append(create_snapshot(str(agg.root), store, "orders").manifest.snapshot_id)
    agg.commit({"a": 4})  # after the last snapshot: only the checkpoint has it
    return agg, store, ids


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_state_get_reads_a_snapshot_or_the_live_checkpoint(stream, capsys) -> None:
    agg, store, ids = stream
    code, out, _ = run(capsys, "state", "get", "--store", str(store.root), "--stream", "orders", "latest",
                       "--key", "k=a", "--json")
    hit = json.loads(out)
    assert code == 0 and (hit["found"], hit["value"], hit["batch_id"]) == (True, {"n": 3}, 2)
    assert all(p.startswith(f"state/0/{hit['partition']}/") or "/_metadata/" in p for p in hit["files_read"])
    code, out, _ = run(capsys, "state", "get", "--checkpoint", str(agg.root), "--key", "a")
    assert code == 0 and out.startswith('found  {"n": 4}') and "at batch 3" in out
    code, out, _ = run(capsys, "state", "get", "--checkpoint", str(agg.root), "--batch", "1", "--key", "k=a", "--json")
    assert json.loads(out)["value"] == {"n": 1}
    code, out, _ = run(capsys, "state", "get", "--store", str(store.root), "--stream", "orders", ids[0],
                       "--key", "k=zz")
    assert code == 0 and out.startswith("not found")


@pytest.mark.parametrize(("args", "words"), [
    (["--key", "k=a"], "give SNAPSHOT (with --store and --stream) or --checkpoint"),
    (["latest", "--key", "k=a"], "needs --store and --stream"),
    (["--checkpoint", "CKPT", "--store", "STORE", "--key", "k=a"], "takes no --store or --stream"),
    (["--store", "STORE", "--stream", "orders", "latest", "--batch", "1", "--key", "k=a"], "--batch goes with --checkpoint"),
    (["--checkpoint", "CKPT", "--key", "n=1"], "no column 'n'"),
    (["--checkpoint", "CKPT", "--key", "k=a", "--state-var", "x"], "has no state variables"),
    (["--checkpoint", "CKPT", "--key", "k=a", "--operator", "3"], "no stateful operator 3"),
])
def test_state_get_refuses_what_cannot_be_asked_in_one_line_with_exit_2(stream, capsys, args, words) -> None:
    agg, store, _ = stream
    argv = [str(agg.root) if a == "CKPT" else str(store.root) if a == "STORE" else a for a in args]
    code, out, err = run(capsys, "state", "get", *argv)
    assert code in (1, 2) and out == "" and words in err and len(err.strip().splitlines()) == 1
    if "operator 3" not in words:  # a missing operator is a lookup failure (exit 1)
        assert code == 2


def test_state_history_prints_where_the_key_changed_and_the_first_snapshot_where_a_condition_holds(
        stream, capsys) -> None:
    _, store, ids = stream
    base = ["state", "history", "--store", str(store.root), "--stream", "orders", "--key", "k=a"]
    code, out, _ = run(capsys, *base)
    lines = out.splitlines()
    assert code == 0 and "3 snapshots on timeline 1, batches 0..2" in lines[0]
    assert [ln.split()[:2] for ln in lines[2:4]] == [["0", "0"], ["2", "2"]]
    assert lines[-1].startswith("2 change(s); ")
    code, out, _ = run(capsys, *base, "--all", "--json")
    doc = json.loads(out)
    assert [v["value"] for v in doc["versions"]] == [{"n": 1}, {"n": 1}, {"n": 3}]
    assert [v["changed"] for v in doc["versions"]] == [True, False, True]
    code, out, _ = run(capsys, *base, "--first-where", "n >= 2", "--json")
    b = json.loads(out)
    assert code == 0 and b["first"]["snapshot_id"] == ids[2] and b["last_before"]["batch_id"] == 1
    code, _, err = run(capsys, *base, "--first-where", "n >>= 2")
    assert code == 2 and "cannot read the condition" in err
    code, _, err = run(capsys, *base, "--from", "5")
    assert code == 1 and "no snapshot on timeline 1 in batches 5..-" in err
