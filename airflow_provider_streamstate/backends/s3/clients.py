"""How this host and a Spark application reach S3: store URLs, boto3 clients from the AWS
environment and their settings, which clients share an account (server-side copies), and
the S3A options and AWS environment that give a Spark job the access a store's own client
has."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.backends.s3.errors import client_error
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError

BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_UNPRINTABLE_RE = re.compile(r"[\x00-\x1f\x7f\\]")


def _endpoint_from_env() -> bool:
    """Whether boto3 will take the S3 endpoint from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL."""
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return False
    return bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))


# A boto3 client of a new session costs about 0.2 CPU-s (the session loads the service model),
# one of a kept session about 6 ms, and a stream's heartbeat on S3 opens its checkpoint for
# every beat: clients are kept per process for the same settings, and built from one session
# per AWS environment. boto3 clients are thread-safe, sessions are not (clients are built
# from them one at a time). A forked child starts with none of them. A client that found no
# credentials is not kept (the next call looks again); credentials that expire (an assumed
# role, web identity, an instance's) are refreshed by the client itself.
_MAX_CACHED_CLIENTS = 16
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
_sessions: dict[tuple[Any, ...], Any] = {}
_build_lock = threading.Lock()
# What else botocore reads when it builds a client: the CA bundle and the proxies.
_CLIENT_ENV = {"REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"}


def _forget_after_fork() -> None:
    """In a forked child: no client, session or lock of the parent (a lock another thread
    held at the fork would never be released)."""
    global _clients_lock, _build_lock
    _clients_lock, _build_lock = threading.Lock(), threading.Lock()
    _clients.clear()
    _sessions.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _aws_env() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_") or k in _CLIENT_ENV))


def _aws_files() -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The AWS config and credentials files boto3 would read, each with what changes when it
    is rewritten or replaced (also by a copy that keeps the modification time)."""
    paths = (os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config",
             os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials")
    found: list[tuple[str, tuple[int, ...]]] = []
    for path in paths:
        try:
            st = os.stat(os.path.expanduser(path))
            found.append((path, (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size)))
        except OSError:
            found.append((path, ()))
    return tuple(found)


def _new_client(**kwargs: Any) -> Any:
    """An S3 client of this process's boto3 session for the current AWS environment; `kwargs`
    (credentials, region, endpoint, config) as `boto3.Session.client` takes them, None for
    the environment's."""
    import boto3

    key = (_aws_env(), _aws_files())
    with _build_lock:
        session = _sessions.get(key)
        if session is None:
            session = _sessions[key] = boto3.session.Session()
            while len(_sessions) > _MAX_CACHED_CLIENTS:
                _sessions.pop(next(iter(_sessions)))
        return session.client("s3", **kwargs)


def _has_credentials(client: Any) -> bool:
    signer = getattr(client, "_request_signer", None)
    return getattr(signer, "_credentials", None) is not None


def cached_client(key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """The client built for `key` in this process, built by `build()` the first time. The
    AWS environment and its files are part of every key: a client without credentials of its
    own takes them from there. A client that found no credentials is returned, not kept."""
    key = (*key, _aws_env(), _aws_files())
    with _clients_lock:
        client = _clients.get(key)
    if client is not None:
        return client
    client = build()
    if not _has_credentials(client):
        return client
    with _clients_lock:
        client = _clients.setdefault(key, client)
        while len(_clients) > _MAX_CACHED_CLIENTS:
            _clients.pop(next(iter(_clients)))
    return client


def _client_from_env(max_connections: int) -> Any:
    return cached_client(("env", max_connections), lambda: _new_client(
        config=client_config(max_connections, path_style=_endpoint_from_env())))


def s3_client(*, max_connections: int = 16) -> Any:
    """A boto3 S3 client from the AWS environment: what boto3 reads itself
    (AWS_ENDPOINT_URL[_S3], credentials, AWS_DEFAULT_REGION, AWS_PROFILE, AWS_CONFIG_FILE);
    a custom endpoint gets path-style addressing. Any configuration error is a one-line
    UsageError naming the setting to fix. (Clients from an Airflow connection come from
    `hooks.store`: the engine does not import Airflow.)"""
    try:
        return _client_from_env(max_connections)
    except StreamstateError:
        raise
    except Exception as exc:  # noqa: BLE001 - building a client fails only on configuration
        raise client_error(exc) from None


def s3_client_from_env(max_connections: int = 16) -> Any:
    """A boto3 S3 client configured by the standard AWS environment variables."""
    return s3_client(max_connections=max_connections)


def is_s3_client(connection: Any) -> bool:
    """True for a boto3 S3 client (what this backend takes as its connection)."""
    meta = getattr(connection, "meta", None)
    model = getattr(meta, "service_model", None)
    return model is not None and getattr(model, "service_name", None) == "s3"


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket[/prefix]`; trailing slashes are dropped, `.`, `..`
    and empty segments refused (S3 would take them literally: another prefix)."""
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not BUCKET_RE.match(bucket):
        raise UsageError(
            f"invalid S3 store URL {url!r}: {bucket!r} is not a bucket name",
            hint="write it as s3://bucket or s3://bucket/prefix (3-63 lowercase letters, digits, dots and hyphens)",
        )
    prefix = prefix.rstrip("/")
    if not prefix:
        return bucket, ""
    if _UNPRINTABLE_RE.search(prefix):
        raise UsageError(
            f"invalid S3 store URL {url!r}: the prefix has a control character or a backslash",
            hint="use printable characters and '/' between the parts of the prefix",
        )
    segments = prefix.split("/")
    dots = [s for s in segments if s in (".", "..")]
    if dots:
        raise UsageError(
            f"invalid S3 store URL {url!r}: S3 keys are not paths, so {dots[0]!r} would not be resolved",
            hint="write the prefix without '.' and '..' segments",
        )
    if "" in segments:
        clean = "/".join(s for s in segments if s)
        raise UsageError(
            f"invalid S3 store URL {url!r}: empty segment ('//') in the prefix, which S3 keeps as part of the key",
            hint=f"write it as s3://{bucket}/{clean}" if clean else f"write it as s3://{bucket}",
        )
    return bucket, prefix


def same_s3_account(a: Any, b: Any) -> bool:
    """Two boto3 clients reach the same endpoint with the same credentials, so CopyObject
    between their buckets works (no bytes through this host)."""
    if a is b:
        return True

    def identity(client: Any) -> tuple[str, str] | None:
        try:
            creds = client._request_signer._credentials  # noqa: SLF001 - botocore keeps them here
            access_key = creds.get_frozen_credentials().access_key if creds is not None else ""
            return str(client.meta.endpoint_url), str(access_key)
        except AttributeError:
            return None

    ia, ib = identity(a), identity(b)
    return ia is not None and ia == ib


def client_config(max_connections: int, *, path_style: bool) -> Any:
    from botocore.config import Config

    return Config(
        max_pool_connections=max_connections,
        retries={"max_attempts": 5, "mode": "standard"},
        # S3-compatible endpoints (MinIO, moto, Ceph) rarely resolve bucket.host names.
        s3={"addressing_style": "path"} if path_style else None,
    )


_AWS_ENDPOINT = re.compile(r"^https://s3([.-][a-z0-9-]+)*\.amazonaws\.com(\.cn)?/?$")


@dataclass(frozen=True)
class S3Access:
    """How a Spark application reaches an S3 store: the endpoint and the credentials the
    store's own client has (an Airflow connection's, role assumption included, or the AWS
    environment's). All None: the cluster's own (an instance role, its core-site.xml)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None

    @classmethod
    def from_client(cls, client: Any) -> S3Access:
        """What `client` (boto3) reaches S3 with; AWS's own endpoints are left to S3A."""
        endpoint = str(client.meta.endpoint_url or "")
        try:
            creds = client._request_signer._credentials  # noqa: SLF001 - botocore keeps them here
            frozen = creds.get_frozen_credentials() if creds is not None else None
        except AttributeError:
            frozen = None
        return cls(endpoint_url=None if not endpoint or _AWS_ENDPOINT.match(endpoint) else endpoint,
                   region=client.meta.region_name,
                   access_key=frozen.access_key if frozen else None,
                   secret_key=frozen.secret_key if frozen else None,
                   session_token=frozen.token if frozen else None)

    @classmethod
    def from_spark_conf(cls, get: Callable[[str], str | None], bucket: str) -> S3Access | None:
        """What `s3a_confs(bucket)` gave the application, read back from its Spark conf
        (`get(key)` returns None when unset): how a driver in the cluster opens the store."""
        p = f"spark.hadoop.fs.s3a.bucket.{bucket}."
        found = cls(get(p + "endpoint"), get(p + "endpoint.region"), get(p + "access.key"), get(p + "secret.key"),
                    get(p + "session.token"))
        return found if any((found.endpoint_url, found.access_key)) else None

    def driver_env(self) -> dict[str, str]:
        """The AWS_* variables of a driver that runs here (client mode, local master)."""
        pairs = {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_DEFAULT_REGION": self.region,
                 "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                 "AWS_SESSION_TOKEN": self.session_token}
        return {k: v for k, v in pairs.items() if v}

    def connection(self) -> Any:
        """What another process opens this checkpoint's connection with (`Reach`)."""
        return self.s3_client()

    def s3_client(self, max_connections: int = 16) -> Any:
        """A boto3 client with this endpoint and these credentials (one per process and
        settings, as `s3_client`'s)."""
        return cached_client(("access", self, max_connections), lambda: _new_client(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token, region_name=self.region, endpoint_url=self.endpoint_url,
            config=client_config(max_connections, path_style=bool(self.endpoint_url))))

    def s3a_confs(self, bucket: str) -> dict[str, str]:
        """S3A per-bucket options for `bucket` only: the executors read the scratch copies
        there, and whatever the user configured for other buckets stays as it is."""
        p = f"spark.hadoop.fs.s3a.bucket.{bucket}."
        out: dict[str, str] = {}
        if self.endpoint_url:
            out[p + "endpoint"] = self.endpoint_url
            out[p + "path.style.access"] = "true"
            out[p + "connection.ssl.enabled"] = "true" if self.endpoint_url.startswith("https") else "false"
        if self.region:
            out[p + "endpoint.region"] = self.region
        if self.access_key and self.secret_key:
            out[p + "access.key"] = self.access_key
            out[p + "secret.key"] = self.secret_key
            if self.session_token:
                out[p + "session.token"] = self.session_token
                out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            else:
                out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return out

    def spark_access(self, bucket: str) -> tuple[dict[str, str], dict[str, str]]:
        return self.s3a_confs(bucket), self.driver_env()


def full_object_sha256(value: str | None, checksum_type: str | None) -> str | None:
    """A SHA-256 checksum S3 reports (base64), as hex; None when there is none, or it is a
    composite one (of a multipart upload's parts: not the object's sha256), or malformed."""
    import base64
    import binascii

    if not value or "-" in value or (checksum_type or "FULL_OBJECT") != "FULL_OBJECT":
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        return None
    return raw.hex() if len(raw) == 32 else None


def _copied_sha256(response: dict[str, Any]) -> str | None:
    result = response.get("CopyObjectResult") or {}
    return full_object_sha256(result.get("ChecksumSHA256"), result.get("ChecksumType"))


def copy_with_sha256(copy: Callable[[bool], dict[str, Any]], carried: bool | None) -> str | None:
    """The SHA-256 of one CopyObject's copy, at a plain copy's cost where the source carries
    one: `copy(ask)` sends it, asking S3 to compute the copy's checksum when `ask`. A source
    that carries a SHA-256 (`carried`, or unknown: None) is copied without asking: S3 keeps
    and returns its checksum. It is sent again asking for one when the source was not known
    to carry one and none came back, or a composite one did (a multipart upload's). None: the
    endpoint returns none for copies (s3proxy); the caller reads the copy back."""
    r = copy(carried is False)
    sha = _copied_sha256(r)
    returned = bool((r.get("CopyObjectResult") or {}).get("ChecksumSHA256"))  # a composite one, then
    if sha is None and carried is not False and (carried is None or returned):
        sha = _copied_sha256(copy(True))
    return sha


def reach_of(connection: Any) -> S3Access | None:
    """What opens `connection` (a boto3 S3 client) again in another process; None for
    anything else."""
    return S3Access.from_client(connection) if is_s3_client(connection) else None


def reach_from_spark_conf(get: Callable[[str], str | None], location: str) -> S3Access | None:
    """The S3 access of a Spark application's checkpoint from its conf (`get(key)`, None when
    unset): the S3A options of the location's bucket, else the global ones; None when
    neither names an endpoint or a key (the environment's)."""
    bucket, _ = parse_s3_url("s3://" + location.split("://", 1)[1])
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
    return access
