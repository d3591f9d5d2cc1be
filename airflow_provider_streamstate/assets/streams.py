"""Airflow Assets of streams: what a snapshot, a validation, a replication or a failover
changed, as asset events the Assets page lists and other DAGs are scheduled on.

One asset per stream and store (and per stream and checkpoint), named after where it lives,
so it is the same asset whatever task, DAG or worker emits it:

    snapshots    streamstate:<stream>:snapshots@<store>     uri <store>/streams/<stream>
    validations  streamstate:<stream>:validations@<store>   uri <store>/streams/<stream>/validations
    checkpoint   streamstate:<stream>:checkpoint@<ckpt>     uri <ckpt>

`<store>` and `<ckpt>` are written one way whatever the spelling: `file:///abs/path` for a
local directory, `s3://bucket/prefix` for S3 (`s3a://` too). These are the schemes Airflow
validates and normalises (file built in, s3 through the amazon provider) and turns into
OpenLineage datasets (namespace `s3://bucket` or `file`, name the key or path), the same
datasets the operators report as lineage (utils/openlineage.py). An S3 URI names the bucket, not the
endpoint: two S3-compatible endpoints holding the same bucket and prefix share the asset.

A stream is known only when a task runs (its spec is templated or mapped), so the operators
declare an AssetAlias as their outlet and attach the stream's asset to it at run time with
the event's `extra`; Airflow creates the asset on its first event. A DAG scheduled on an
alias runs on the events of every asset attached to it (dags/streamstate_on_snapshot.py).
Replicas arrive through their own alias, so a DAG on new snapshots is not run again by the
copies it makes.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from airflow.sdk import Asset, AssetAlias

SNAPSHOTS = AssetAlias("streamstate-snapshots")  # a snapshot taken (SnapshotStreamOperator)
REPLICAS = AssetAlias("streamstate-replicas")  # a snapshot copied into another store
VALIDATIONS = AssetAlias("streamstate-validations")  # a suite's result recorded on a snapshot
FAILOVERS = AssetAlias("streamstate-failovers")  # a stream's checkpoint restored for DR


def location_uri(location: str) -> str:
    """A store or checkpoint location as one URI: `file:///abs/path` or `s3://bucket/key`."""
    loc = location.strip()
    for scheme in ("s3a://", "s3n://"):
        if loc.startswith(scheme):
            loc = "s3://" + loc[len(scheme):]
    if loc.startswith("s3://"):
        return loc.rstrip("/")
    if loc.startswith("file:"):
        loc = "/" + loc[len("file:"):].lstrip("/")
    if loc.startswith("/"):
        return "file://" + (posixpath.normpath(loc) if loc != "/" else "/")
    if "://" in loc:
        return loc.rstrip("/")
    return "file://" + posixpath.normpath(os.path.abspath(loc))


def snapshots_asset(stream: str, store: str) -> Asset:
    """The snapshots of `stream` in `store`: one event per snapshot taken or copied there."""
    uri = location_uri(store)
    return Asset(name=f"streamstate:{stream}:snapshots@{uri}", uri=f"{uri}/streams/{stream}")


def validations_asset(stream: str, store: str) -> Asset:
    """The validation results of `stream`'s snapshots in `store` (known-good or not)."""
    uri = location_uri(store)
    return Asset(name=f"streamstate:{stream}:validations@{uri}", uri=f"{uri}/streams/{stream}/validations")


def checkpoint_asset(stream: str, checkpoint: str) -> Asset:
    """The running state of `stream` at `checkpoint`: an event when a snapshot is restored into it."""
    uri = location_uri(checkpoint)
    return Asset(name=f"streamstate:{stream}:checkpoint@{uri}", uri=uri)


def with_outlet(kwargs: dict[str, Any], alias: AssetAlias) -> dict[str, Any]:
    """An operator's kwargs with `alias` among its outlets (beside the caller's own)."""
    outlets = kwargs.get("outlets")
    outlets = list(outlets) if isinstance(outlets, list | tuple) else ([outlets] if outlets is not None else [])
    if alias not in outlets:
        outlets.append(alias)
    return {**kwargs, "outlets": outlets}


def emit(context: Any, outlets: list[Any], alias: AssetAlias, asset: Asset, extra: dict[str, Any]) -> None:
    """Record an event on `asset` with `extra`, sent when the task succeeds: on the asset itself
    when the task declares it, else through `alias`. Nothing outside a task run (no outlet
    events in the context, e.g. an operator executed directly)."""
    events = context.get("outlet_events") if hasattr(context, "get") else None
    if events is None:
        return
    declared = [o for o in outlets if isinstance(o, Asset) and (o.name, o.uri) == (asset.name, asset.uri)]
    if declared:
        events[declared[0]].extra = extra
    elif alias in outlets:
        events[alias].add(asset, extra=extra)


def snapshots_to_handle(
    extras: list[dict[str, Any]], streams: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The snapshots that snapshot events name, of configured streams in their own store, once
    each in event order, as `{"stream": <its spec dict>, "snapshot_id": ...}`; and a line for
    each event passed over (another stream or store, no snapshot id)."""
    by_name = {s["name"]: s for s in streams}
    handled: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    passed_over: list[str] = []
    for extra in extras:
        name, snapshot_id, store = extra.get("stream"), extra.get("snapshot_id"), extra.get("store")
        spec = by_name.get(name) if isinstance(name, str) else None
        if not isinstance(snapshot_id, str) or not snapshot_id or not isinstance(store, str):
            passed_over.append(f"an event without a snapshot: {extra}")
        elif spec is None:
            passed_over.append(f"{snapshot_id}: stream {name} is not configured")
        elif location_uri(spec["store"]) != location_uri(store):
            passed_over.append(f"{snapshot_id}: in {store}, not in stream {name}'s store {spec['store']}")
        elif (spec["name"], snapshot_id) not in seen:
            seen.add((spec["name"], snapshot_id))
            handled.append({"stream": spec, "snapshot_id": snapshot_id})
    return handled, passed_over
