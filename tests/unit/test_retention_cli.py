"""The retention, pin, GC and clone commands as a script sees them: exit codes, one JSON
document with the documented fields, and one line on stderr for bad input."""

from __future__ import annotations

import json
import os
import time

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.stores.base import blob_key
from tests.unit.store_history import at, put_blob, put_snapshot


def _store(tmp_path) -> tuple[LocalStore, list[str], str]:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = [put_snapshot(store, "orders", b, at(f"2026-11-1{b}T00:00")).snapshot_id for b in range(4)]
    orphan = put_blob(store, b"orphan")
    old = time.time() - 2 * 86400
    os.utime(store.root / blob_key(orphan), (old, old))
    return store, ids, orphan


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_retention_apply_deletes_what_the_policy_does_not_keep_and_says_why(tmp_path, capsys) -> None:
    store, ids, _ = _store(tmp_path)
    args = ["retention", "apply", "--store", str(store.root), "--stream", "orders", "--keep-last", "2", "--max-age", "1d"]
    code, out, _ = _run(capsys, *args, "--dry-run", "--json")
    assert code == 0 and [d["snapshot_id"] for d in json.loads(out)["deleted"]] == ids[:2]
    assert store.list_snapshot_ids("orders") == ids
    code, out, _ = _run(capsys, *args)
    assert code == 0 and "kept 2, deleted 2 snapshot(s)" in out
    assert store.list_snapshot_ids("orders") == ids[2:]


def test_gc_prints_the_documented_json_fields(tmp_path, capsys) -> None:
    store, _, orphan = _store(tmp_path)
    code, out, _ = _run(capsys, "gc", "--store", str(store.root), "--json")
    r = json.loads(out)
    assert code == 0
    assert {"blobs_deleted", "bytes_deleted", "blobs_kept", "bytes_kept", "blobs_young", "seconds"} <= set(r)
    assert (r["blobs_deleted"], r["blobs_kept"]) == (1, 4) and not store.has_blob(orphan)


def test_pin_keeps_a_snapshot_from_retention_and_unpin_releases_it(tmp_path, capsys) -> None:
    store, ids, _ = _store(tmp_path)
    assert _run(capsys, "pin", "--store", str(store.root), "--stream", "orders", ids[0], "--reason", "audit")[0] == 0
    _run(capsys, "retention", "apply", "--store", str(store.root), "--stream", "orders", "--keep-last", "1",
         "--max-age", "1m")
    assert store.list_snapshot_ids("orders") == [ids[0], ids[3]]
    code, out, _ = _run(capsys, "unpin", "--store", str(store.root), "--stream", "orders", ids[0], "--json")
    assert code == 0 and json.loads(out)["was_pinned"] is True


def test_bad_input_exits_2_with_one_line_on_stderr(tmp_path, capsys) -> None:
    store, _, _ = _store(tmp_path)
    for argv in (
        ["retention", "apply", "--store", str(store.root), "--stream", "orders", "--keep-last", "1", "--max-age", "7y"],
        ["retention", "apply", "--store", str(store.root), "--stream", "orders", "--keep-last", "-1", "--max-age", "7d"],
        ["gc", "--store", str(store.root), "--grace", "1h"],
        ["clone", "expire", "--store", str(store.root), "--force"],
    ):
        code, out, err = _run(capsys, *argv)
        assert code == 2, argv
        assert out == "" and len(err.strip().splitlines()) == 1, (argv, err)


def test_clone_list_and_expire_on_a_store_without_clones(tmp_path, capsys) -> None:
    store, _, _ = _store(tmp_path)
    code, out, _ = _run(capsys, "clone", "list", "--store", str(store.root), "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = _run(capsys, "clone", "expire", "--store", str(store.root), "--json")
    assert code == 0 and json.loads(out)["clones_expired"] == 0
