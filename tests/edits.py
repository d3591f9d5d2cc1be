"""A work copy of a golden checkpoint cut at its last batch (snapshot, then restore: what
an edit starts from), and a small repair edit of its first keys, for the edit tests.

Tests import helpers from here, never from conftest.py (see tests/s3.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.goldens import Golden

_VERSIONED = re.compile(r"^\.?(\d+)(?:_[0-9a-fA-F-]+)?\.(delta|snapshot|zip|changelog)(\.crc)*$")


def work_copy(g: Golden, tmp_path: Path, *, via_snapshot: bool = False) -> str:
    """The golden's last batch N as an edit starts from it, in `tmp_path/work`: a copy of the
    checkpoint without what came after N (later offsets and commits, state versions past
    N+1, as a snapshot's cut leaves out), or `via_snapshot`: restored from a snapshot."""
    work = tmp_path / "work"
    n = g.last_batch
    if via_snapshot:
        store = LocalStore(tmp_path / "store", fsync=False)
        m = create_snapshot(g.checkpoint, store, "golden", batch_id=n).manifest
        restore_snapshot(store, "golden", m.snapshot_id, str(work), new_query_id=True, fsync=False)
        return str(work)
    shutil.copytree(g.checkpoint, work)
    for path in list(work.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(work).parts
        name = path.name.lstrip(".").removesuffix(".crc")
        later_log = rel[0] in ("offsets", "commits") and name.isdigit() and int(name) > n
        m = _VERSIONED.match(path.name)
        if later_log or (rel[0] == "state" and m and int(m.group(1)) > n + 1):
            path.unlink()
    return str(work)


def repair_of(g: Golden, deletes: int = 2, sets: int = 1) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """(the edit's JSON, the rows deleted, the rows set) for the golden's first keys in
    Spark's reader order: `deletes` keys deleted, then `sets` keys set to the first row's
    value (a value the store holds, of the right types)."""
    rows = g.state().rows
    gone, changed = rows[:deletes], rows[deletes:deletes + sets]
    value = list(rows[0].value) if isinstance(rows[0].value, tuple) else [rows[0].value]
    edit = {"delete": [r.key_input for r in gone],
            "set": [{"key": r.key_input, "value": value} for r in changed]}
    return edit, gone, changed


def schema_file(key: dict[str, Any], value: dict[str, Any]) -> bytes:
    """A state schema file of version 2 as Spark writes one (`writeUTF("v2")`, then the key's
    and the value's schema JSON, each as a count of `writeUTF` chunks): what a new query
    version's checkpoint holds, for migration tests."""
    import json
    import struct

    def utf(text: str) -> bytes:
        raw = text.encode("utf-8")
        return struct.pack(">H", len(raw)) + raw

    def chunks(text: str) -> bytes:
        parts = [text[i:i + 60_000] for i in range(0, len(text), 60_000)] or [""]
        return struct.pack(">i", len(parts)) + b"".join(utf(p) for p in parts)

    return utf("v2") + chunks(json.dumps(key, separators=(",", ":"))) + chunks(json.dumps(value, separators=(",", ":")))


def struct_json(*fields: tuple[str, str, bool]) -> dict[str, Any]:
    """Spark's JSON of a struct of (name, type, nullable) fields."""
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": null, "metadata": {}}
                                         for n, t, null in fields]}
