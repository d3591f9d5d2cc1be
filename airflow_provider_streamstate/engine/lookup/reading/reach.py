"""How another process reaches a checkpoint the way this one does: a worker process of a
local digest, or a Spark executor of a rescale job.

A connection (a boto3 client, a WebHDFS client) does not cross a process boundary; what it
was made from does: an S3 endpoint and credentials (`S3Access`), a NameNode's WebHDFS
addresses and user. `Reach` holds that, pickles, and opens the same connection on the other
side. Without a connection (a local directory, or a remote one reached with the
environment's credentials) the other side uses its own environment, as Spark's executors
do. A Spark application's reach comes from its conf: the S3A options the stream (or the
submitter) set for the checkpoint's bucket, else the global ones. A `Reach` may carry
credentials: it is never logged (its repr names the kind only) nor recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.filesystems.s3 import parse_s3_location
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.stores.s3_clients import S3Access
from airflow_provider_streamstate.engine.stores.webhdfs import HdfsPath, WebHdfs


@dataclass(frozen=True)
class Reach:
    """What opens a checkpoint's connection in another process; all None: the environment's."""

    s3: S3Access | None = field(default=None, repr=False)
    webhdfs: tuple[tuple[str, ...], str, float, str] | None = None  # NameNode URLs, user, timeout, authority

    def __repr__(self) -> str:
        kind = "s3" if self.s3 is not None else "webhdfs" if self.webhdfs is not None else "environment"
        return f"Reach({kind})"

    @classmethod
    def of(cls, connection: Any) -> Reach:
        """The reach of a connection `open_checkpoint_fs` accepts (None, a WebHDFS client, a
        boto3 S3 client)."""
        if connection is None:
            return cls()
        if isinstance(connection, WebHdfs):
            return cls(webhdfs=(tuple(connection.urls), connection.user, connection.timeout_s, connection.authority))
        meta = getattr(connection, "meta", None)
        if meta is not None and getattr(meta, "service_model", None) is not None \
                and meta.service_model.service_name == "s3":
            return cls(s3=S3Access.from_client(connection))
        raise UsageError(f"cannot hand a {type(connection).__name__} connection to other processes",
                         hint="give a boto3 S3 client, a WebHDFS client, or none (the environment's)")

    @classmethod
    def from_spark_conf(cls, get: Callable[[str], str | None], location: str) -> Reach:
        """The reach of a Spark application's checkpoint from its conf (`get(key)`, None when
        unset): for an S3 location, the S3A options of its bucket, else the global ones; for
        HDFS, the NameNode this process's Hadoop configuration names (executors may have
        none of their own); nothing set, or a local location: the environment's."""
        if location.lower().startswith("hdfs://"):
            try:
                return cls.of(WebHdfs.for_authority(HdfsPath.parse(location).authority))
            except UsageError:
                return cls()  # no Hadoop configuration here: the executors' own, if any
        if not location.lower().startswith(("s3a://", "s3://")):
            return cls()
        bucket, _ = parse_s3_location(location)
        access = S3Access.from_spark_conf(get, bucket)
        if access is None:
            p = "spark.hadoop.fs.s3a."
            found = S3Access(get(p + "endpoint"), get(p + "endpoint.region"), get(p + "access.key"),
                             get(p + "secret.key"), get(p + "session.token"))
            access = found if any((found.endpoint_url, found.access_key)) else None
        if access is not None and access.endpoint_url and "://" not in access.endpoint_url:
            secure = (get(f"spark.hadoop.fs.s3a.bucket.{bucket}.connection.ssl.enabled")
                      or get("spark.hadoop.fs.s3a.connection.ssl.enabled") or "true")
            scheme = "https" if secure.lower() == "true" else "http"
            access = S3Access(f"{scheme}://{access.endpoint_url}", access.region, access.access_key,
                              access.secret_key, access.session_token)
        return cls(s3=access)

    def connection(self) -> Any:
        """The connection to open the checkpoint with here (None: the environment's)."""
        if self.s3 is not None:
            return self.s3.s3_client()
        if self.webhdfs is not None:
            urls, user, timeout_s, authority = self.webhdfs
            return WebHdfs(list(urls), user=user, timeout_s=timeout_s, authority=authority)
        return None

    def open(self, location: str) -> CheckpointFS:
        return open_checkpoint_fs(location, connection=self.connection())
