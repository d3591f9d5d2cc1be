"""Store maintenance: garbage collection of each snapshot store daily, clone expiry hourly.

Stores come from the run's `stores` param (a manual run) or, on schedule, from the
Airflow Variable `streamstate_stores`: a JSON list of `{"store": "s3://bucket/prefix",
"storage_conn_id": "aws_primary"}` (or plain URLs; the key's old name `aws_conn_id` is read
too). One mapped task per store, so a failing store does not hold up the others. GC frees
the blobs no snapshot references once the grace period has passed (retention, in `streamstate_scheduled_snapshot`, only deletes
manifests); clone expiry tears down clones whose expiry has passed (stream, checkpoint,
snapshots, and topics when asked for at clone time).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.engine.core.config.renamed import with_current_names
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.operators.clones import ExpireClonesOperator
from airflow_provider_streamstate.operators.gc import GarbageCollectOperator

STORES_VARIABLE = "streamstate_stores"


def configured_stores(params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The stores as `{"store", "storage_conn_id"}` dicts; skips the task when none is configured."""
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    stores = (params or {}).get("stores") or Variable.get(STORES_VARIABLE, default=[], deserialize_json=True)
    if not stores:
        raise AirflowSkipException(f"no stores configured: set the Variable {STORES_VARIABLE} or the stores param")
    if not isinstance(stores, list):
        raise AirflowFailException(f"stores must be a list, not {type(stores).__name__}")
    out = []
    for s in stores:
        entry = {"store": s} if isinstance(s, str) else s
        if isinstance(entry, dict):
            try:
                entry = with_current_names(entry, what=f"store entry {s!r}")
            except UsageError as exc:
                raise AirflowFailException(exc.one_line()) from None
        if not isinstance(entry, dict) or not isinstance(entry.get("store"), str) or set(entry) - {"store", "storage_conn_id"}:
            raise AirflowFailException(f"invalid store entry {s!r}: give a URL or {{'store': URL, 'storage_conn_id': CONN}}")
        out.append({"store": entry["store"], "storage_conn_id": entry.get("storage_conn_id")})
    return out


with DAG(
    dag_id="streamstate_store_maintenance",
    description="Expire clones hourly and garbage-collect each snapshot store daily",
    schedule=timedelta(hours=1),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={
        "stores": Param([], type="array",
                        description="store URLs or {store, storage_conn_id}; empty: the Variable streamstate_stores"),
        "gc_hour": Param(3, type="integer", minimum=0, maximum=23, description="the UTC hour of the daily GC"),
        "gc_now": Param(False, type="boolean", description="run GC in this run whatever the hour"),
        "grace": Param("24h", type="string", description="GC grace period (more than the longest snapshot, 6h)"),
        "dry_run": Param(False, type="boolean", description="report what would be deleted; delete nothing"),
    },
    tags=["streamstate"],
) as dag:

    @task
    def stores(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The stores to maintain, each checked before any task touches one."""
        return configured_stores(params)

    configured = stores()

    ExpireClonesOperator.partial(
        task_id="expire_clones", dry_run="{{ params.dry_run }}", retries=2, retry_delay=timedelta(minutes=1),
    ).expand_kwargs(configured)

    @task.short_circuit
    def daily(params: dict[str, Any] | None = None, data_interval_end: Any = None) -> bool:
        """GC once a day: in the run that ends in the GC hour (or when asked for)."""
        params = params or {}
        return bool(params.get("gc_now")) or data_interval_end is None or data_interval_end.hour == params.get("gc_hour", 3)

    gc = GarbageCollectOperator.partial(
        task_id="gc", grace="{{ params.grace }}", dry_run="{{ params.dry_run }}", retries=2,
        retry_delay=timedelta(minutes=5),
    ).expand_kwargs(configured)
    daily() >> gc
