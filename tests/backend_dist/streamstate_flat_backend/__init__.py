"""The `flat://` backend: a snapshot store at `flat:///abs/path` keeping every object (blob,
manifest, record) as one file of one directory, its key percent-encoded as the file name.
A write goes to a temp file that is hard-linked to its name, so it is atomic and
create-only: of two writers of one name exactly one wins, and a reader never sees part of
a file. It stands on streamstate's public bases alone (`SnapshotStore`, `Backend`)."""

from __future__ import annotations

from airflow_provider_streamstate.engine.stores import Backend
from streamstate_flat_backend.store import open_flat

BACKEND = Backend(name="flat", store_schemes=("flat",), open_store=open_flat, store_example="flat:///abs/path")
