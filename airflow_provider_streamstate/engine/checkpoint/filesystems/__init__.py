"""Where checkpoints live: one `CheckpointFS` per kind of filesystem, opened by the backend
registered for the location's scheme (engine/stores/backends.py). Shipped with this package
(airflow_provider_streamstate/backends/):

    /abs/path, file:/abs/path, file:///abs/path   backends.local (a local or mounted directory)
    s3a://bucket/path, s3://bucket/path          backends.s3 (an S3 key prefix)
    hdfs://namenode[:port]/path                  backends.hdfs (HDFS, through WebHDFS)

Adding one: a backend package with its `CheckpointFS` (filesystems/base.py says what each
method must guarantee), registered under its schemes (docs/backends.md). The rest of the
engine asks a location's filesystem what it can do, never which kind it is.

`connection` is how the caller reaches the filesystem, passed as given: a boto3 client for
S3 (an Airflow connection's, a store's), a WebHDFS client for HDFS; None opens one from the
environment (the AWS variables, HADOOP_CONF_DIR), as Spark's own clients do.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems.base import (
    MAX_RECORD_BYTES,
    CheckpointFS,
    FileStat,
    ListingMismatch,
    Staging,
    given_path,
    host_dir_for,
    listing_mismatch,
    streamstate_home,
)
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError, UsageError
from airflow_provider_streamstate.engine.stores.backends import Backend, backend_for, examples

__all__ = [
    "MAX_RECORD_BYTES", "CheckpointFS", "FileStat", "ListingMismatch", "Staging", "checkpoint_backend", "given_path",
    "host_dir_for", "listing_mismatch", "location_scheme", "open_checkpoint_fs", "streamstate_home", "unsupported_scheme",
]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")
_WINDOWS_DRIVE = re.compile(r"^[a-zA-Z]:[\\/]")


def location_scheme(location: str) -> str:
    """The scheme of a checkpoint location, lower case; `file` for a plain path."""
    m = _SCHEME.match(location)
    if not m or _WINDOWS_DRIVE.match(location):
        return "file"
    return m.group(1).lower()


def checkpoint_backend(location: str) -> Backend | None:
    """The backend that opens checkpoints at `location`, None when no installed one does."""
    scheme = location_scheme(location)
    backend = backend_for(scheme)
    if backend is None or backend.open_checkpoint is None or scheme not in backend.checkpoint_schemes:
        return None
    return backend


def unsupported_scheme(location: str) -> UnsupportedCheckpointError | None:
    """The one-line refusal of a checkpoint location whose scheme no filesystem reads, or None."""
    if checkpoint_backend(location) is not None:
        return None
    scheme = location_scheme(location)
    hint = f"give a local path or one of: {examples('checkpoint')} (docs/deployment.md)"
    if scheme in ("viewfs", "webhdfs", "swebhdfs"):
        hint += "; name the HDFS NameNode itself (hdfs://), as Spark's own hdfs client does"
    return UnsupportedCheckpointError(f"checkpoint {location!r}: the {scheme}:// scheme is not supported", hint=hint)


def open_checkpoint_fs(location: str, *, connection: Any = None, conn_id: str | None = None) -> CheckpointFS:
    """The filesystem of a checkpoint location, reached through `connection` (see the
    module docstring); `conn_id` names the caller's connection in error hints."""
    backend = checkpoint_backend(location)
    if backend is None or backend.open_checkpoint is None:
        raise unsupported_scheme(location) or UnsupportedCheckpointError(f"checkpoint {location!r} is not supported")
    scheme = location_scheme(location)
    if scheme != "file" and not location.lower().startswith(f"{scheme}://"):
        raise UsageError(f"invalid checkpoint location {location!r}: a {scheme} location starts with {scheme}://",
                         hint=f"write it as {backend.checkpoint_example or scheme + '://host/path'}")
    fs: CheckpointFS = backend.open_checkpoint(location, connection, conn_id)
    return fs
