"""Where checkpoints live: one `CheckpointFS` per kind of filesystem, chosen by the
location's scheme.

    /abs/path, file:/abs/path, file:///abs/path   local.LocalCheckpointFS (a local or mounted directory)
    s3a://bucket/path, s3://bucket/path          s3.S3CheckpointFS (an S3 key prefix)
    hdfs://namenode[:port]/path                  hdfs.HdfsCheckpointFS (HDFS, through WebHDFS)

Adding one: a module here with its `CheckpointFS` (filesystems/base.py says what each
method must guarantee) and its line in `SCHEMES`. The rest of the engine asks a location's
filesystem what it can do, never which kind it is.

`connection` is how the caller reaches the filesystem, passed as given: a boto3 client for
S3 (an Airflow connection's, a store's), a WebHDFS client for HDFS; None opens one from the
environment (the AWS variables, HADOOP_CONF_DIR), as Spark's own clients do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems.base import (
    MAX_RECORD_BYTES,
    CheckpointFS,
    FileStat,
    Staging,
    host_dir_for,
    streamstate_home,
)
from airflow_provider_streamstate.engine.checkpoint.filesystems.hdfs import open_hdfs
from airflow_provider_streamstate.engine.checkpoint.filesystems.local import (
    LocalCheckpointFS,
    local_checkpoint_path,
    open_local,
)
from airflow_provider_streamstate.engine.checkpoint.filesystems.s3 import open_s3
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError, UsageError

__all__ = [
    "MAX_RECORD_BYTES", "SCHEMES", "CheckpointFS", "FileStat", "LocalCheckpointFS", "Staging", "host_dir_for",
    "local_checkpoint_path", "location_scheme", "open_checkpoint_fs", "streamstate_home", "unsupported_scheme",
]

Opener = Callable[[str, Any, "str | None"], CheckpointFS]

SCHEMES: dict[str, Opener] = {
    "file": open_local,
    "s3a": open_s3,
    "s3": open_s3,
    "hdfs": open_hdfs,
}

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")
_WINDOWS_DRIVE = re.compile(r"^[a-zA-Z]:[\\/]")


def location_scheme(location: str) -> str:
    """The scheme of a checkpoint location, lower case; `file` for a plain path."""
    m = _SCHEME.match(location)
    if not m or _WINDOWS_DRIVE.match(location):
        return "file"
    return m.group(1).lower()


def unsupported_scheme(location: str) -> UnsupportedCheckpointError | None:
    """The one-line refusal of a checkpoint location whose scheme no filesystem reads, or None."""
    scheme = location_scheme(location)
    if scheme in SCHEMES:
        return None
    hint = ("give a local path, a file:// URI, an s3a://bucket/path (s3://) or an hdfs://namenode/path location "
            "(docs/deployment.md)")
    if scheme in ("viewfs", "webhdfs", "swebhdfs"):
        hint += "; name the HDFS NameNode itself (hdfs://), as Spark's own hdfs client does"
    return UnsupportedCheckpointError(f"checkpoint {location!r}: the {scheme}:// scheme is not supported", hint=hint)


def open_checkpoint_fs(location: str, *, connection: Any = None, conn_id: str | None = None) -> CheckpointFS:
    """The filesystem of a checkpoint location, reached through `connection` (see the
    module docstring); `conn_id` names the caller's connection in error hints."""
    refusal = unsupported_scheme(location)
    if refusal is not None:
        raise refusal
    scheme = location_scheme(location)
    if scheme != "file" and not location.lower().startswith(f"{scheme}://"):
        raise UsageError(f"invalid checkpoint location {location!r}: a {scheme} location starts with {scheme}://",
                         hint=f"write it as {scheme}://{'bucket' if scheme.startswith('s3') else 'namenode:8020'}/path")
    return SCHEMES[scheme](location, connection, conn_id)
