"""YARN: a driver in cluster deploy mode runs in the application master's container, seen
and stopped through the ResourceManager's REST API from any host that reaches it.

In cluster mode spark-submit only submits (`spark.yarn.submit.waitAppCompletion=false`),
and the launching process (an Airflow task) may end at once. What a launch records beside
the checkpoint is the application id spark-submit printed and the ResourceManager's address;
any worker asks the ResourceManager (`GET /ws/v1/cluster/apps/{id}`: state, final status,
diagnostics) and kills through it (`PUT /ws/v1/cluster/apps/{id}/state {"state": "KILLED"}`,
as the submitting user: `?user.name=`, which unsecured clusters with ACLs need and others
ignore). One attempt only (`spark.yarn.maxAppAttempts=1`): a second attempt of the
application master would run the same launch (the same fencing token) beside a first one
YARN lost touch with.

The ResourceManager is found the way spark-submit finds it: `yarn-site.xml` in
`YARN_CONF_DIR` or `HADOOP_CONF_DIR` (`yarn.resourcemanager.webapp.address`, or its HTTPS
twin under `yarn.http.policy=HTTPS_ONLY`; every RM of an HA pair). A Kerberos-secured
ResourceManager (SPNEGO) is not supported here: docs/deployment.md.

Spark copies every conf of the application into its staging directory
(`<spark.yarn.stagingDir or the user's home>/.sparkStaging/<id>`) and removes it when the
application ends by itself; a killed one leaves it, confs and all: `clean_up` removes it.
Pure Python (urllib).
"""

from __future__ import annotations

import getpass
import http.client
import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.core.config import hadoop_conf
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamstateError,
    TransientError,
    UsageError,
)
from airflow_provider_streamstate.engine.streams.command import cluster_deploy_mode, conf_value, with_confs
from airflow_provider_streamstate.engine.streams.managers.base import ClusterApp, ClusterManager, Prepared

log = logging.getLogger("streamstate.launcher")

APP_ID = re.compile(r"\bapplication_\d+_\d+\b")
STARTING = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED")
ENDED = ("FINISHED", "FAILED", "KILLED")


@dataclass(frozen=True)
class YarnApp:
    """One application as the ResourceManager reports it."""

    app_id: str
    state: str  # NEW | NEW_SAVING | SUBMITTED | ACCEPTED | RUNNING | FINISHED | FAILED | KILLED
    final_status: str  # UNDEFINED | SUCCEEDED | FAILED | KILLED
    diagnostics: str
    am_container_logs: str | None
    tracking_url: str | None
    user: str | None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def missing(self) -> bool:
        return False  # an application the ResourceManager does not know is a NotFoundError

    def stream_state(self) -> str:
        """The launcher's word for it: starting, running, stopped (ended successfully),
        failed (the application failed) or dead (killed)."""
        if self.state in STARTING:
            return "starting"
        if self.state == "RUNNING":
            return "running"
        if self.state == "FINISHED" and self.final_status == "SUCCEEDED":
            return "stopped"
        if self.state == "KILLED" or self.final_status == "KILLED":
            return "dead"
        return "failed"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ResourceManager:
    """The REST API of one YARN ResourceManager (or of an HA pair: the first that answers)."""

    def __init__(self, urls: str | list[str], *, user: str | None = None, timeout_s: float = 10.0) -> None:
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise UsageError("no YARN ResourceManager address",
                             hint="set YARN_CONF_DIR or HADOOP_CONF_DIR to the cluster's configuration")
        self.user = user
        self.timeout_s = timeout_s

    @property
    def url(self) -> str:
        return self.urls[0]

    def app(self, app_id: str) -> YarnApp:
        """The application's state; NotFoundError when the ResourceManager does not know it
        (wrong cluster, or forgotten after yarn.resourcemanager.max-completed-applications)."""
        d = self._call("GET", f"/ws/v1/cluster/apps/{_checked(app_id)}")
        app = d.get("app") if isinstance(d, dict) else None
        if not isinstance(app, dict) or "state" not in app:
            raise TransientError(f"the ResourceManager at {self.url} answered an unexpected document for {app_id}",
                                 hint="check that the address is a YARN ResourceManager's web app")
        return YarnApp(
            app_id=str(app.get("id") or app_id), state=str(app["state"]),
            final_status=str(app.get("finalStatus") or "UNDEFINED"),
            diagnostics=str(app.get("diagnostics") or "").strip(),
            am_container_logs=app.get("amContainerLogs"), tracking_url=app.get("trackingUrl"),
            user=app.get("user"),
        )

    def kill(self, app_id: str, *, user: str | None = None) -> None:
        """Ask the ResourceManager to kill the application (it answers at once; the state
        turns KILLED within a second or so). Killing an ended application does nothing."""
        self._call("PUT", f"/ws/v1/cluster/apps/{_checked(app_id)}/state", {"state": "KILLED"},
                   user=user or self.user or getpass.getuser())

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *, user: str | None = None) -> Any:
        query = f"?user.name={urllib.parse.quote(user)}" if user else ""
        last: Exception | None = None
        for base in self.urls:
            req = urllib.request.Request(
                base + path + query, method=method, data=None if body is None else json.dumps(body).encode(),
                headers={"Accept": "application/json", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    text = r.read()
                    return json.loads(text) if text else {}
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise NotFoundError(f"the ResourceManager at {base} does not know {path.split('/')[5]}",
                                        hint="check the application id and that it is this cluster's") from None
                if exc.code in (401, 403):
                    raise UsageError(f"the ResourceManager at {base} refused {method} {path} ({exc.code})",
                                     hint="submit and stop streams as the same user, or grant it the queue's "
                                     "administer ACL; Kerberos (SPNEGO) is not supported") from None
                if exc.code == 307 or exc.code >= 500:  # a standby RM redirects; try the next one
                    last = exc
                    continue
                raise TransientError(f"the ResourceManager at {base} answered {exc.code} to {method} {path}") from None
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
                last = exc
        raise TransientError(f"no YARN ResourceManager answered ({', '.join(self.urls)}): {last}",
                             hint="check that the cluster is up and reachable from this worker")


def _checked(app_id: str) -> str:
    if not APP_ID.fullmatch(app_id):
        raise UsageError(f"{app_id!r} is not a YARN application id", hint="it looks like application_<ts>_<n>")
    return app_id


def submitted_app_id(spark_submit_output: str) -> str | None:
    """The application id spark-submit printed when it submitted ("Submitted application
    application_..."), or None."""
    found = re.search(r"Submitted application (application_\d+_\d+)", spark_submit_output)
    if found:
        return found.group(1)
    ids = APP_ID.findall(spark_submit_output)
    return ids[-1] if ids else None


def resource_manager_urls(env: Mapping[str, str] | None = None) -> list[str]:
    """The ResourceManager web addresses in the YARN configuration spark-submit reads
    (`yarn-site.xml` in YARN_CONF_DIR, else HADOOP_CONF_DIR); [] when there is none."""
    site = hadoop_conf.site_file("yarn-site.xml", env, yarn=True)
    if site is None:
        return []
    props = hadoop_conf.read_site(site)
    https = props.get("yarn.http.policy", "HTTP_ONLY") == "HTTPS_ONLY"
    key = "yarn.resourcemanager.webapp.https.address" if https else "yarn.resourcemanager.webapp.address"
    scheme = "https" if https else "http"
    ids = [i.strip() for i in props.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()]
    if props.get("yarn.resourcemanager.ha.enabled") == "true" and ids:
        addresses = [props.get(f"{key}.{i}") or _with_default_port(props.get(f"yarn.resourcemanager.hostname.{i}"), https)
                     for i in ids]
    else:
        addresses = [props.get(key) or _with_default_port(props.get("yarn.resourcemanager.hostname"), https)]
    return [f"{scheme}://{a}" for a in addresses if a]


def _with_default_port(host: str | None, https: bool) -> str | None:
    return f"{host}:{8090 if https else 8088}" if host else None


# spark-submit says where it stages the application: "Uploading resource X -> <dir>/.sparkStaging/<id>/<file>".
_STAGING = re.compile(r"-> (\S+?/\.sparkStaging/(application_\d+_\d+))/")


def submitting_user(env: Mapping[str, str]) -> str:
    """Who YARN and HDFS take spark-submit to be (simple authentication, as Hadoop's client
    decides): HADOOP_USER_NAME in its environment, else its OS user."""
    return (env.get("HADOOP_USER_NAME") or "").strip() or getpass.getuser()


def staging_base(command: Sequence[str], env: Mapping[str, str]) -> str:
    """Where Spark stages a YARN application's files: `spark.yarn.stagingDir`, else the
    submitting user's home on the cluster's default filesystem (`fs.defaultFS`), as
    Spark's YARN client decides."""
    configured = conf_value(command, "spark.yarn.stagingDir")
    if configured:
        return configured.rstrip("/")
    default_fs = hadoop_conf.load("core-site.xml", env=env).get("fs.defaultFS", "file:///")
    if default_fs.startswith("file:"):
        return f"file:{Path.home()}"
    return f"{default_fs.rstrip('/')}/user/{submitting_user(env)}"


class YarnManager(ClusterManager):
    """`--master yarn`: the driver on the cluster in cluster deploy mode, here in client mode."""

    name = "yarn"

    def accepts(self, master: str) -> bool:
        return master == "yarn"

    def driver_on_cluster(self, command: Sequence[str]) -> bool:
        return cluster_deploy_mode(command)

    def check(self, command: Sequence[str], env: Mapping[str, str]) -> None:
        if self.driver_on_cluster(command) and not resource_manager_urls(env):  # before YARN accepts anything
            raise UsageError("cluster deploy mode on YARN needs the cluster's configuration",
                             hint="set YARN_CONF_DIR or HADOOP_CONF_DIR (in the spec's or the job's env) to the "
                             "directory of its yarn-site.xml")

    def prepare(self, command: Sequence[str], *, name: str, launch_id: str, settings: Mapping[str, str],
                env: Mapping[str, str]) -> Prepared:
        if not self.driver_on_cluster(command):
            return Prepared(list(command), dict(env), None)
        self.check(command, env)
        confs = [("spark.yarn.submit.waitAppCompletion", "false"), ("spark.yarn.maxAppAttempts", "1"),
                 *((f"spark.yarn.appMasterEnv.{k}", v) for k, v in sorted(settings.items()))]
        app = ClusterApp(self.name, None, resource_manager_urls(env), submitting_user(env),
                         staging=staging_base(command, env))
        return Prepared(with_confs(command, confs), submit_client_env(env), app)

    def identify(self, app: ClusterApp, output: str) -> ClusterApp:
        app_id = submitted_app_id(output)
        staged = next((m.group(1) for m in _STAGING.finditer(output) if m.group(2) == app_id), None)
        return replace(app, app_id=app_id, staging=staged or (f"{app.staging}/.sparkStaging/{app_id}"
                                                              if app.staging and app_id else app.staging))

    def known(self, app: ClusterApp) -> bool:
        return bool(app.app_id and app.rm_urls)

    def report(self, app: ClusterApp) -> YarnApp:
        assert app.app_id is not None
        return ResourceManager(app.rm_urls, user=app.user or None, timeout_s=5).app(app.app_id)

    def kill(self, app: ClusterApp) -> None:
        assert app.app_id is not None
        ResourceManager(app.rm_urls, user=app.user or None).kill(app.app_id)

    def clean_up(self, app: ClusterApp) -> list[str]:
        from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs

        if not app.staging or not app.app_id or not app.staging.rstrip("/").endswith(f".sparkStaging/{app.app_id}"):
            return []
        try:
            removed = open_checkpoint_fs(app.staging).as_user(app.user).delete_all()  # its owner's
        except (StreamstateError, OSError) as exc:
            why = exc.one_line() if isinstance(exc, StreamstateError) else str(exc)
            log.warning("could not remove the staging directory %s of %s: %s", app.staging, app.app_id, why)
            return []
        return [f"removed the staging directory {app.staging} ({removed} files)"] if removed else []


# spark-submit only hands the application to YARN: a small JVM (cluster mode sets no -Xmx
# of its own, so the default would be a quarter of the host's memory).
SUBMIT_CLIENT_JVM = "-Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def submit_client_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a spark-submit that only submits."""
    out = dict(env)
    out["SPARK_SUBMIT_OPTS"] = f"{SUBMIT_CLIENT_JVM} {out.get('SPARK_SUBMIT_OPTS', '')}".strip()
    return out
