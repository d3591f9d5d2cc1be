"""A stream's driver on YARN (cluster deploy mode), seen and stopped through the
ResourceManager's REST API, from any host that reaches it.

In cluster mode spark-submit only submits: the driver runs in the application master's
container on the cluster, and the launching process (an Airflow task) may end at once. What
a launch records beside the checkpoint (engine/streams/launcher.py) is then the application
id and the ResourceManager's address; any worker asks the ResourceManager
(`GET /ws/v1/cluster/apps/{id}`: state, final status, diagnostics) and kills through it
(`PUT /ws/v1/cluster/apps/{id}/state {"state": "KILLED"}`, as the submitting user:
`?user.name=`, which unsecured clusters with ACLs need and others ignore).

The ResourceManager is found the way spark-submit finds it: `yarn-site.xml` in
`YARN_CONF_DIR` or `HADOOP_CONF_DIR` (`yarn.resourcemanager.webapp.address`, or its HTTPS
twin under `yarn.http.policy=HTTPS_ONLY`; every RM of an HA pair). A Kerberos-secured
ResourceManager (SPNEGO) is not supported here: docs/deployment.md. Pure Python (urllib).
"""

from __future__ import annotations

import getpass
import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.core.errors import NotFoundError, TransientError, UsageError
from airflow_provider_streamstate.engine.streams.kubernetes import option_value

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


def yarn_cluster_mode(command: Sequence[str]) -> bool:
    """Whether spark-submit `command` runs its driver on YARN (`--master yarn --deploy-mode cluster`)."""
    return option_value(command, "--master") == "yarn" and option_value(command, "--deploy-mode") == "cluster"


def submitted_app_id(spark_submit_output: str) -> str | None:
    """The application id spark-submit printed when it submitted ("Submitted application
    application_..."), or None."""
    found = re.search(r"Submitted application (application_\d+_\d+)", spark_submit_output)
    if found:
        return found.group(1)
    ids = APP_ID.findall(spark_submit_output)
    return ids[-1] if ids else None


def resource_manager_urls(env: dict[str, str] | None = None) -> list[str]:
    """The ResourceManager web addresses in the YARN configuration spark-submit reads
    (`yarn-site.xml` in YARN_CONF_DIR, else HADOOP_CONF_DIR); [] when there is none."""
    environ = {**os.environ, **(env or {})}
    for var in ("YARN_CONF_DIR", "HADOOP_CONF_DIR"):
        site = Path(environ.get(var, "")) / "yarn-site.xml"
        if environ.get(var) and site.is_file():
            return _urls_from_site(site)
    return []


def _urls_from_site(site: Path) -> list[str]:
    props: dict[str, str] = {}
    try:
        root = ET.parse(site).getroot()
    except (ET.ParseError, OSError) as exc:
        raise UsageError(f"cannot read the YARN configuration {site}: {exc}",
                         hint="point YARN_CONF_DIR or HADOOP_CONF_DIR at the cluster's configuration") from None
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            props[name.strip()] = value.strip()
    for name, value in props.items():  # Hadoop's ${other.key} references, as Configuration.get expands them
        for _ in range(5):
            expanded = re.sub(r"\$\{([^}]+)\}", lambda m: props.get(m.group(1), m.group(0)), value)
            if expanded == value:
                break
            value = expanded
        props[name] = value
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
