"""HDFS over its REST API (WebHDFS), for `hdfs://` checkpoints and stores.

Spark reaches `hdfs://namenode:8020/path` through Hadoop's Java client; this engine is pure
Python, so it speaks WebHDFS to the same NameNode (`/webhdfs/v1/<path>?op=...`), found the
way Hadoop finds it: `hdfs-site.xml` in HADOOP_CONF_DIR (`dfs.namenode.http-address`, per
NameNode of an HA nameservice, or its HTTPS twin under `dfs.http.policy=HTTPS_ONLY`), else
the NameNode's host on the default HTTP port 9870. Reads and writes are redirected by the
NameNode to a DataNode, which streams the bytes.

What the atomic publishes rely on is HDFS's own semantics, used through the operations
that expose them: `CREATE` with `overwrite=false` fails on an existing file; `RENAME` of a
file onto an existing one returns false and changes nothing (create-only publish of a
complete temp file), `renameoptions=OVERWRITE` replaces it atomically; renaming a
directory is atomic. fsspec's WebHDFS client, the maintained Python one, hides exactly
these (its `mv` drops RENAME's result and options, its writes always overwrite, its errors
keep only the message of Hadoop's RemoteException), so this module is a small client of
its own on `requests`, as engine/streams/managers/yarn.py is for YARN's REST API.

Security: simple authentication (`user.name`: HADOOP_USER_NAME, else, in a Spark
application's container, SPARK_USER, else the OS user), as on a cluster without Kerberos;
Kerberos (SPNEGO) is not supported here (docs/deployment.md).
"""

from __future__ import annotations

import getpass
import io
import os
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

from airflow_provider_streamstate.engine.core.config import hadoop_conf
from airflow_provider_streamstate.engine.core.errors import StreamstateError, TransientError, UsageError

DEFAULT_RPC_PORT = 8020
DEFAULT_HTTP_PORT = 9870
DEFAULT_HTTPS_PORT = 9871
TIMEOUT_S = 30.0


class HdfsError(StreamstateError):
    """HDFS refused an operation for a reason a retry does not change."""


@dataclass(frozen=True)
class HdfsPath:
    """An `hdfs://authority/path` split: the NameNode (or nameservice) and the absolute path."""

    authority: str  # host:port, or an HA nameservice id
    path: str  # absolute, no trailing slash ("/" for the root)

    @classmethod
    def parse(cls, uri: str) -> HdfsPath:
        parts = urllib.parse.urlsplit(uri)
        if parts.scheme.lower() != "hdfs" or not parts.netloc:
            raise UsageError(f"invalid HDFS location {uri!r}", hint="write it as hdfs://namenode:8020/path")
        path = "/" + "/".join(p for p in parts.path.split("/") if p)
        if any(p in (".", "..") for p in path.split("/")):
            raise UsageError(f"invalid HDFS location {uri!r}: '.' and '..' are not resolved",
                             hint="write the path without '.' and '..' segments")
        return cls(parts.netloc, path)

    @property
    def uri(self) -> str:
        return f"hdfs://{self.authority}{'' if self.path == '/' else self.path}"

    def join(self, rel: str) -> HdfsPath:
        rel = rel.strip("/")
        return self if not rel else HdfsPath(self.authority, f"{self.path.rstrip('/')}/{rel}")


def namenode_urls(authority: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The WebHDFS base URLs (`http://host:port/webhdfs/v1`) of the NameNode(s) behind
    `authority`, from the Hadoop configuration (see the module docstring)."""
    props = hadoop_conf.load("core-site.xml", "hdfs-site.xml", env=env)
    https = props.get("dfs.http.policy", "HTTP_ONLY") == "HTTPS_ONLY"
    key, scheme = ("dfs.namenode.https-address", "https") if https else ("dfs.namenode.http-address", "http")
    host, _, port = authority.partition(":")
    nameservices = [n.strip() for n in props.get("dfs.nameservices", "").split(",") if n.strip()]
    if authority in nameservices:  # an HA nameservice: every NameNode of it, the active one answers
        ids = [i.strip() for i in props.get(f"dfs.ha.namenodes.{authority}", "").split(",") if i.strip()]
        found = [props[f"{key}.{authority}.{i}"] for i in ids if props.get(f"{key}.{authority}.{i}")]
        if not found:
            raise UsageError(f"HDFS nameservice {authority} has no {key}.{authority}.<namenode> in the Hadoop "
                             "configuration", hint="set HADOOP_CONF_DIR to the cluster's configuration")
        return [f"{scheme}://{a}/webhdfs/v1" for a in found]
    rpc = f"{host}:{port or DEFAULT_RPC_PORT}"
    for name, value in props.items():  # the http address of the NameNode whose rpc address this is
        if name.startswith("dfs.namenode.rpc-address") and value == rpc:
            suffix = name[len("dfs.namenode.rpc-address"):]
            if props.get(key + suffix):
                return [f"{scheme}://{props[key + suffix]}/webhdfs/v1"]
    default_fs = props.get("fs.defaultFS", "")
    if props.get(key) and default_fs.startswith("hdfs://") and _same_namenode(default_fs, rpc):
        return [f"{scheme}://{props[key]}/webhdfs/v1"]
    return [f"{scheme}://{host}:{DEFAULT_HTTPS_PORT if https else DEFAULT_HTTP_PORT}/webhdfs/v1"]


def _same_namenode(default_fs: str, rpc: str) -> bool:
    netloc = urllib.parse.urlsplit(default_fs).netloc
    host, _, port = netloc.partition(":")
    return f"{host}:{port or DEFAULT_RPC_PORT}" == rpc


def hadoop_user(env: Mapping[str, str] | None = None) -> str:
    """Who HDFS is told this client is: HADOOP_USER_NAME, else, in a Spark application's
    container, the user Spark acts as there (SPARK_USER: spark-submit's own user), else the
    OS user (as Hadoop's simple authentication does)."""
    found = {**os.environ, **(env or {})}
    return (found.get("HADOOP_USER_NAME") or found.get("SPARK_USER") or getpass.getuser()).strip()


FAILOVER_PROVIDER = "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"
# This engine's own keys of a Spark application's conf for the NameNodes of an authority a
# connection resolved (`spark_access`): their WebHDFS URLs and the certificate check.
WEBHDFS_URLS = "spark.streamstate.webhdfs.{}.urls"
WEBHDFS_VERIFY = "spark.streamstate.webhdfs.{}.verify"


def _rpc_address(url: str, port: int) -> str:
    host = urllib.parse.urlsplit(url).hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def spark_access(client: WebHdfs, authority: str,
                 env: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """What a Spark application needs to reach `hdfs://<authority>` as `client` does, when
    an Airflow connection made `client` (it knows the NameNodes' RPC port); nothing for a
    client of the Hadoop configuration, which the application has too
    (`SnapshotStore.spark_access`). spark-submit's environment names the connection's HDFS
    user (HADOOP_USER_NAME; Spark passes spark-submit's user to its containers as
    SPARK_USER); the WebHDFS URLs and certificate check reach this engine in the
    application's driver (`reach_from_spark_conf`; a CA bundle's path does not travel: true
    is sent for it). Where the authority is a name only the connection resolves (no port,
    and not a nameservice of the Hadoop configuration in `env`, spark-submit's): the Hadoop
    properties of an HA nameservice of that name for Spark's own HDFS client too (the
    configuration's own nameservices stay listed)."""
    if client.rpc_port is None:
        return {}, {}
    env_out = {"HADOOP_USER_NAME": client.user}
    confs = {WEBHDFS_URLS.format(authority): ",".join(client.urls),
             WEBHDFS_VERIFY.format(authority): "false" if client.verify is False else "true"}
    if ":" in authority:  # Spark's HDFS client reaches host:port itself
        return confs, env_out
    site = hadoop_conf.load("hdfs-site.xml", env=env)
    listed = [n.strip() for n in site.get("dfs.nameservices", "").split(",")]
    if authority in listed or any(k.startswith(f"dfs.namenode.rpc-address.{authority}") for k in site):
        return confs, env_out  # spark-submit's Hadoop configuration defines the service: its NameNodes stay
    ids = [f"nn{i}" for i in range(len(client.urls))]
    p = hadoop_conf.SPARK_PREFIX
    confs |= {p + "dfs.nameservices": ",".join(dict.fromkeys([*(n for n in listed if n), authority])),
              p + f"dfs.ha.namenodes.{authority}": ",".join(ids),
              p + f"dfs.client.failover.proxy.provider.{authority}": FAILOVER_PROVIDER}
    for i, url in zip(ids, client.urls, strict=True):
        confs[p + f"dfs.namenode.rpc-address.{authority}.{i}"] = _rpc_address(url, client.rpc_port)
    return confs, env_out


@dataclass(frozen=True)
class WebHdfsAccess:
    """A WebHDFS client's settings, picklable: another process opens the same client."""

    urls: tuple[str, ...]
    user: str
    timeout_s: float = TIMEOUT_S
    authority: str = ""
    verify: bool | str = True
    rpc_port: int | None = None

    def connection(self) -> WebHdfs:
        return WebHdfs(list(self.urls), user=self.user, timeout_s=self.timeout_s, authority=self.authority,
                       verify=self.verify, rpc_port=self.rpc_port)


def reach_of(connection: Any) -> WebHdfsAccess | None:
    """What opens `connection` (a WebHdfs client) again in another process; None for anything else."""
    return connection.access() if isinstance(connection, WebHdfs) else None


def reach_from_spark_conf(get: Callable[[str], str | None], location: str) -> WebHdfsAccess | None:
    """The NameNode(s) of a Spark application's HDFS location: those `spark_access` gave the
    application for its authority (read back from its conf: `get(key)`, None when unset),
    else those this process's Hadoop configuration names (its executors may have none of
    their own); None without either."""
    try:
        authority = HdfsPath.parse(location).authority
        urls = tuple(u.strip() for u in (get(WEBHDFS_URLS.format(authority)) or "").split(",") if u.strip())
        if urls:
            verify = (get(WEBHDFS_VERIFY.format(authority)) or "true").strip().lower() != "false"
            return WebHdfsAccess(urls, hadoop_user(), authority=authority, verify=verify)
        return WebHdfs.for_authority(authority).access()
    except UsageError:
        return None


class WebHdfs:
    """One NameNode's (or HA pair's) WebHDFS API. Thread-safe: one `requests` session per thread."""

    def __init__(self, urls: list[str], *, user: str | None = None, timeout_s: float = TIMEOUT_S,
                 authority: str = "", verify: bool | str = True, rpc_port: int | None = None) -> None:
        if not urls:
            raise UsageError("no WebHDFS address", hint="set HADOOP_CONF_DIR to the cluster's configuration")
        self.urls = [u.rstrip("/") for u in urls]
        self.user = user or hadoop_user()
        self.timeout_s = timeout_s
        self.authority = authority
        self.verify = verify  # HTTPS: check the NameNode's certificate (True), against a CA bundle (a path), or not
        # The NameNodes' RPC port where an Airflow connection made this client: what a Spark
        # application's Hadoop client is given with their hosts (`spark_access`); else None.
        self.rpc_port = rpc_port
        self._local = threading.local()

    @classmethod
    def for_authority(cls, authority: str, env: Mapping[str, str] | None = None) -> WebHdfs:
        """The client of the NameNode behind `hdfs://<authority>`, configured from the environment."""
        return cls(namenode_urls(authority, env), user=hadoop_user(env), authority=authority)

    def __repr__(self) -> str:
        return f"WebHdfs({self.urls[0]}, user={self.user})"

    def access(self) -> WebHdfsAccess:
        """What opens this client again in another process (`Reach`)."""
        return WebHdfsAccess(tuple(self.urls), self.user, self.timeout_s, self.authority, self.verify,
                             self.rpc_port)

    @property
    def identity(self) -> tuple[tuple[str, ...], str]:
        """What makes two clients the same connection: NameNodes and user."""
        return tuple(self.urls), self.user

    def _session(self) -> Any:
        import requests

        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = requests.Session()
            s.verify = self.verify
        return s

    # --- the REST calls --------------------------------------------------------------------

    def _call(self, method: str, path: str, op: str, *, what: str, ok: tuple[int, ...] = (200,),
              data: Any = None, redirect_body: Any = None, **params: Any) -> Any:
        """One operation; a redirect to a DataNode is followed with `redirect_body` (CREATE)
        or a GET (OPEN). FileNotFoundError for an absent path; HdfsError, UsageError or
        TransientError otherwise."""
        import requests

        query = {"op": op, "user.name": self.user, **{k: v for k, v in params.items() if v is not None}}
        last: Exception | None = None
        for base in list(self.urls):
            url = f"{base}{urllib.parse.quote(path, safe='/')}"
            try:
                r = self._session().request(method, url, params=query, data=data, timeout=self.timeout_s,
                                            allow_redirects=False, stream=op == "OPEN")
                if r.status_code == 307 and "Location" in r.headers:
                    location = r.headers["Location"]
                    if op == "CREATE":
                        r = self._session().put(location, data=redirect_body, timeout=self.timeout_s,
                                                headers={"Content-Type": "application/octet-stream"})
                    else:
                        r = self._session().request(method, location, timeout=self.timeout_s, stream=True)
            except requests.RequestException as exc:
                last = exc
                continue
            if r.status_code in ok:
                if base != self.urls[0]:  # the active NameNode first from now on
                    self.urls.remove(base)
                    self.urls.insert(0, base)
                return r
            exc_class, message = _remote_exception(r)
            if exc_class == "StandbyException" or r.status_code in (502, 503, 504):
                last = TransientError(f"the NameNode at {base} cannot serve {what} now: {message}")
                continue
            if exc_class == "FileNotFoundException" or r.status_code == 404:
                raise FileNotFoundError(f"{what}: {path}")
            if exc_class in ("AccessControlException", "SecurityException") or r.status_code in (401, 403):
                raise UsageError(f"HDFS refused {what} ({path}) to user {self.user}: {message}",
                                 hint="give the user write access there, or set HADOOP_USER_NAME "
                                 "(Kerberos is not supported)")
            if exc_class == "FileAlreadyExistsException":
                raise FileExistsError(path)
            if r.status_code >= 500:
                raise TransientError(f"HDFS failed {what} ({path}): {exc_class or r.status_code}: {message}",
                                     hint="retry; check the NameNode and DataNode logs if it persists")
            raise HdfsError(f"HDFS refused {what} ({path}): {exc_class or r.status_code}: {message}")
        raise TransientError(f"no HDFS NameNode answered {what} ({', '.join(self.urls)}): {last}",
                             hint="check that HDFS is up and reachable from this host (HADOOP_CONF_DIR)")

    def status(self, path: str) -> dict[str, Any] | None:
        """GETFILESTATUS: `{"type", "length", "modificationTime" (ms), "fileId", ...}`, None when absent."""
        try:
            return dict(self._call("GET", path, "GETFILESTATUS", what="stat").json()["FileStatus"])
        except FileNotFoundError:
            return None

    def list(self, path: str) -> list[dict[str, Any]] | None:
        """LISTSTATUS of a directory (each with its `pathSuffix`), None when absent."""
        try:
            statuses = self._call("GET", path, "LISTSTATUS", what="list").json()["FileStatuses"]["FileStatus"]
        except FileNotFoundError:
            return None
        return [dict(s) for s in statuses]

    @contextmanager
    def open(self, path: str, *, offset: int = 0, length: int | None = None) -> Iterator[BinaryIO]:
        """OPEN: the file's bytes (a range of them) as a stream from its DataNode."""
        r = self._call("GET", path, "OPEN", what="read", offset=offset or None, length=length)
        r.raw.decode_content = True
        try:
            yield io.BufferedReader(_Body(r.raw, self, path), buffer_size=1 << 20)  # type: ignore[arg-type]
        finally:
            r.close()

    def read(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        with self.open(path, offset=offset, length=length) as f:
            return f.read()

    def create(self, path: str, data: bytes | Iterable[bytes], *, overwrite: bool = False) -> None:
        """CREATE the file with `data` (bytes, or chunks streamed as they come): the parent
        directories are made; FileExistsError when it exists and `overwrite` is false."""
        self._call("PUT", path, "CREATE", what="write", ok=(201,), redirect_body=data,
                   overwrite="true" if overwrite else "false")

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> bool:
        """RENAME: False (nothing changed) when `dst` exists and `overwrite` is false, or `src`
        is absent; with `overwrite`, an existing `dst` file is replaced atomically."""
        if overwrite:
            try:
                self._call("PUT", src, "RENAME", what="rename", destination=dst, renameoptions="OVERWRITE")
            except FileNotFoundError:
                return False
            return True
        return bool(self._call("PUT", src, "RENAME", what="rename", destination=dst).json().get("boolean"))

    def mkdirs(self, path: str) -> None:
        self._call("PUT", path, "MKDIRS", what="make a directory")

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """DELETE: True when something was deleted, False when it was absent."""
        try:
            r = self._call("DELETE", path, "DELETE", what="delete", recursive="true" if recursive else "false")
        except FileNotFoundError:
            return False
        return bool(r.json().get("boolean"))

    def set_modified(self, path: str, epoch_ms: int) -> bool:
        """SETTIMES: the file's modification time (its age for GC); False when it is absent."""
        try:
            self._call("PUT", path, "SETTIMES", what="touch", modificationtime=str(epoch_ms), accesstime="-1")
        except FileNotFoundError:
            return False
        return True


def _remote_exception(r: Any) -> tuple[str | None, str]:
    """Hadoop's RemoteException (`{"RemoteException": {"exception", "message"}}`) of a response."""
    try:
        d = r.json()["RemoteException"]
        return str(d.get("exception") or ""), str(d.get("message") or "").splitlines()[0][:500]
    except (ValueError, KeyError, TypeError, IndexError):
        return None, (r.text or "").strip().splitlines()[0][:500] if (r.text or "").strip() else str(r.status_code)


class _Body(io.RawIOBase):
    """A DataNode's response body whose connection errors are one-line, retryable errors."""

    def __init__(self, raw: Any, client: WebHdfs, path: str) -> None:
        self.raw, self.client, self.path = raw, client, path

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        try:
            return bytes(self.raw.read(None if size is None or size < 0 else size))
        except Exception as exc:  # noqa: BLE001 - urllib3's errors: the connection broke mid-body
            raise TransientError(f"reading {self.path} from HDFS broke off: {type(exc).__name__}: {exc}",
                                 hint="retry") from None

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
