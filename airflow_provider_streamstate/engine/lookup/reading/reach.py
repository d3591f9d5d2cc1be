"""How another process reaches a checkpoint the way this one does: a worker process of a
local digest, or a Spark executor of a rescale job.

A connection (a boto3 client, a WebHDFS client) does not cross a process boundary; what it
was made from does, as the location's backend describes it: an S3 endpoint and
credentials, a NameNode's WebHDFS addresses and user. `Reach` holds that, pickles, and opens
the same connection on the other side. Without a connection (a local directory, or a remote one reached with the
environment's credentials) the other side uses its own environment, as Spark's executors
do. A Spark application's reach comes from its conf: the S3A options the stream (or the
submitter) set for the checkpoint's bucket, else the global ones. A `Reach` may carry
credentials: it is never logged (its repr names the kind only) nor recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import (
    CheckpointFS,
    checkpoint_backend,
    open_checkpoint_fs,
)
from airflow_provider_streamstate.engine.core.errors import UsageError


@dataclass(frozen=True)
class Reach:
    """What opens a checkpoint's connection in another process: its backend's picklable
    `access` (with a `connection()` method); None: the environment's."""

    access: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Reach({'environment' if self.access is None else type(self.access).__name__})"

    @classmethod
    def of(cls, connection: Any, location: str) -> Reach:
        """The reach of a connection `open_checkpoint_fs(location, ...)` accepts (None: the
        environment's), as the location's backend describes it."""
        if connection is None:
            return cls()
        backend = checkpoint_backend(location)
        access = None if backend is None or backend.reach is None else backend.reach(connection)
        if access is None:
            raise UsageError(f"cannot hand a {type(connection).__name__} connection to other processes",
                             hint="give the connection the checkpoint's backend takes, or none (the environment's)")
        return cls(access)

    @classmethod
    def from_spark_conf(cls, get: Callable[[str], str | None], location: str) -> Reach:
        """The reach of a Spark application's checkpoint from its conf (`get(key)`, None when
        unset), as the location's backend reads it (S3: the S3A options of its bucket, else the
        global ones; HDFS: the NameNodes the submitter gave it for an HDFS connection's
        authority, else those this process's Hadoop configuration names); nothing
        set, or a backend that reads none: the environment's."""
        backend = checkpoint_backend(location)
        if backend is None or backend.reach_from_spark_conf is None:
            return cls()
        return cls(backend.reach_from_spark_conf(get, location))

    def connection(self) -> Any:
        """The connection to open the checkpoint with here (None: the environment's)."""
        return None if self.access is None else self.access.connection()

    def open(self, location: str) -> CheckpointFS:
        return open_checkpoint_fs(location, connection=self.connection())
