"""The local backend: snapshot stores and checkpoints in a directory of this host (a local
disk or a shared mount), `file:///abs/path` or an absolute path. It takes no connection."""

from __future__ import annotations

from airflow_provider_streamstate.backends.local.checkpoint import open_local as open_local_checkpoint
from airflow_provider_streamstate.backends.local.store import open_local as open_local_store
from airflow_provider_streamstate.engine.stores.backends import Backend

BACKEND = Backend(
    name="local",
    store_schemes=("file",),
    checkpoint_schemes=("file",),
    open_store=open_local_store,
    open_checkpoint=open_local_checkpoint,
    store_example="file:///abs/path",
    checkpoint_example="file:///abs/path",
)
