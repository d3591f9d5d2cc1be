"""Our own JSON records (timelines, lineage, tombstones, GC leases, clone records and labels,
launch, driver and stop records, heartbeats): one object tagged with its format
(`streamstate.<kind>/v1`), so a reader refuses a file that is not the record it expects
before it trusts any field. What each field may hold is checked by the record's own class:
records are untrusted input (a store can be written by anyone with its keys)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def dump_record(fmt: str, fields: Mapping[str, Any]) -> bytes:
    """A record's bytes: its fields under the format tag, indented for people who read them."""
    return json.dumps({"format": fmt, **fields}, indent=1).encode()


def load_record(data: bytes | str, fmt: str, what: str) -> dict[str, Any]:
    """The fields of a record of format `fmt`; ValueError when `data` is not one."""
    d = json.loads(data)
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise ValueError(f"not a {what}")
    return d
