"""Operator extra links: from a snapshot, validate, replicate or failover task instance to the
snapshot's page in the Streams UI (the provider's plugin):

    {api base_url}/streamstate/streams/<stream>/snapshots/<snapshot id>?store=<store url>

The snapshot comes from the task's XCom (its `result.to_json()`), so the link is computed
once, by the worker, when the task ends (Airflow 3 stores it as an XCom); a task that
produced no snapshot (failed, skipped) gets no link. `store` is always given: the page then
reads the store that holds the snapshot, the primary one or a DR replica.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink, conf

UI_PREFIX = "/streamstate"


def snapshot_page_url(stream: str, snapshot_id: str, store: str | None, *, base_url: str | None = None) -> str:
    """The Streams UI page of one snapshot; relative to the UI when `api.base_url` is unset."""
    base = (base_url if base_url is not None else conf.get("api", "base_url", fallback="") or "").rstrip("/")
    url = f"{base}{UI_PREFIX}/streams/{quote(stream, safe='')}/snapshots/{quote(snapshot_id, safe='')}"
    return f"{url}?{urlencode({'store': store})}" if store else url


def snapshot_of(result: Any) -> tuple[str, str, str | None] | None:
    """(stream, snapshot id, store) a task's XCom names, or None: a snapshot's, a validation's
    or a failover's result (`store` added by the operator), or a replication's newest copy."""
    if not isinstance(result, dict):
        return None
    if isinstance(result.get("snapshots"), list) and result.get("destination"):  # a replication
        copied = [s for s in result["snapshots"] if isinstance(s, dict) and s.get("snapshot_id")]
        if not copied or not result.get("stream"):
            return None
        return str(result["stream"]), str(copied[-1]["snapshot_id"]), str(result["destination"])
    if result.get("snapshot_id") and result.get("stream"):
        return str(result["stream"]), str(result["snapshot_id"]), result.get("store") or None
    return None


class SnapshotLink(BaseOperatorLink):
    """The snapshot a streamstate task took, validated, replicated or restored, in the Streams UI."""

    name = "Snapshot"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        found = snapshot_of(XCom.get_value(ti_key=ti_key, key="return_value"))
        if found is None:
            return ""
        stream, snapshot_id, store = found
        return snapshot_page_url(stream, snapshot_id, store)
