"""Kubernetes: a driver in cluster deploy mode runs in a pod the launcher names, seen and
deleted through the Kubernetes API, from any host that reaches it.

The same shape as YARN (engine/streams/managers/yarn.py): spark-submit only submits
(`spark.kubernetes.submission.waitAppCompletion=false`); the launcher names the driver pod
itself (`spark.kubernetes.driver.pod.name`, unique per launch), so the launch record beside
the checkpoint says where the driver is before spark-submit has said anything; the
supervised driver gets its settings as `spark.kubernetes.driverEnv.*`. Status is the pod's
(phase, container state, termination message) together with the heartbeat; the forced stop
deletes the pod.

The API is reached with the `kubernetes` client package when it is installed (in-cluster
config, else ~/.kube/config), which the cncf.kubernetes Airflow provider brings. Not run
against a real cluster here (none is available): docs/deployment.md says what is tested.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import TransientError, UsageError
from airflow_provider_streamstate.engine.streams.command import cluster_deploy_mode, conf_value, with_confs
from airflow_provider_streamstate.engine.streams.managers.base import ClusterApp, ClusterManager, Prepared

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NEVER_STARTS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError")


def driver_pod_name(stream: str, launch_id: str) -> str:
    """A DNS-1123 pod name unique to the launch (at most 63 characters)."""
    tail = _NOT_DNS.sub("-", launch_id.lower()).strip("-")[-24:]
    head = _NOT_DNS.sub("-", stream.lower()).strip("-")[: 63 - len(tail) - len("-driver-")] or "stream"
    return f"{head}-driver-{tail}".strip("-")


def namespace_of(command: Sequence[str]) -> str:
    """The namespace spark-submit will create the driver pod in (`spark.kubernetes.namespace`)."""
    return conf_value(command, "spark.kubernetes.namespace") or "default"


def submission_confs(pod: str, settings: Mapping[str, str]) -> list[tuple[str, str]]:
    """The confs a cluster-mode launch adds: return once submitted, the driver pod's name,
    and the driver's settings in its environment."""
    return [("spark.kubernetes.submission.waitAppCompletion", "false"), ("spark.kubernetes.driver.pod.name", pod),
            *((f"spark.kubernetes.driverEnv.{k}", v) for k, v in sorted(settings.items()))]


class KubernetesManager(ClusterManager):
    """`--master k8s://...`: the driver in a pod in cluster deploy mode, here in client mode."""

    name = "kubernetes"

    def accepts(self, master: str) -> bool:
        return master.startswith("k8s://")

    def driver_on_cluster(self, command: Sequence[str]) -> bool:
        return cluster_deploy_mode(command)

    def prepare(self, command: Sequence[str], *, name: str, launch_id: str, settings: Mapping[str, str],
                env: Mapping[str, str]) -> Prepared:
        if not self.driver_on_cluster(command):
            return Prepared(list(command), dict(env), None)
        # The driver runs in a pod the launcher names: known before spark-submit says anything.
        pod = driver_pod_name(name, launch_id)
        app = ClusterApp(self.name, None, [], getpass.getuser(), namespace_of(command), pod)
        return Prepared(with_confs(command, submission_confs(pod, settings)), dict(env), app)

    def known(self, app: ClusterApp) -> bool:
        return bool(app.namespace and app.pod)

    def describe(self, app: ClusterApp) -> str:
        return f"pod {app.namespace}/{app.pod}"

    def report(self, app: ClusterApp) -> DriverPod:
        assert app.namespace is not None and app.pod is not None
        return KubernetesApi().pod(app.namespace, app.pod)

    def kill(self, app: ClusterApp) -> None:
        if app.namespace and app.pod:
            KubernetesApi().delete(app.namespace, app.pod)


@dataclass(frozen=True)
class DriverPod:
    """The driver pod as the Kubernetes API reports it (the fields the launcher reads)."""

    pod: str
    state: str  # the pod's phase: Pending | Running | Succeeded | Failed | Unknown | Gone
    reason: str  # the driver container's waiting/terminated reason, or the pod's
    diagnostics: str  # its termination message, else the reason's message
    deleting: bool

    @property
    def ended(self) -> bool:
        """Its driver will not run (on): finished, failed, gone, being deleted, or unable to start."""
        return self.stream_state() != "starting" and self.stream_state() != "running"

    @property
    def am_container_logs(self) -> str | None:
        return None

    @property
    def missing(self) -> bool:
        """The API has no such pod: deleted, or not created yet."""
        return self.state == "Gone"

    def stream_state(self) -> str:
        """The launcher's word: starting, running, stopped, failed or dead (killed, evicted,
        out of memory, deleted)."""
        if self.state == "Gone" or self.reason in ("OOMKilled", "Evicted"):
            return "dead"
        if self.deleting and self.state not in ("Succeeded", "Failed"):
            return "running"  # terminating: its driver may still run (grace period) until the pod is gone
        if self.state == "Pending" and self.reason in _NEVER_STARTS:
            return "failed"  # a pod that cannot start waits forever: say so instead of "starting"
        return {"Pending": "starting", "Running": "running", "Succeeded": "stopped", "Failed": "failed"}.get(
            self.state, "starting")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def driver_pod_from_api(pod_name: str, pod: Mapping[str, Any] | None) -> DriverPod:
    """A DriverPod from the API's pod document (`V1Pod.to_dict()` or the raw JSON; camel or
    snake case); None (404) reads as Gone: deleted, or never created."""
    if pod is None:
        return DriverPod(pod_name, "Gone", "", "the driver pod does not exist (deleted, or never created)", False)

    def get(d: Mapping[str, Any] | None, *names: str) -> Any:
        for n in names:
            if d and d.get(n) is not None:
                return d[n]
        return None

    status = get(pod, "status") or {}
    metadata = get(pod, "metadata") or {}
    phase = str(get(status, "phase") or "Unknown")
    reason, message = str(get(status, "reason") or ""), str(get(status, "message") or "")
    for cs in get(status, "containerStatuses", "container_statuses") or []:
        state = get(cs, "state") or {}
        term = get(state, "terminated")
        wait = get(state, "waiting")
        if term:
            code = get(term, "exitCode", "exit_code")
            reason = str(get(term, "reason") or reason)
            message = str(get(term, "message") or message or f"exit code {code}")
        elif wait and get(wait, "reason") not in (None, "ContainerCreating", "PodInitializing"):
            reason, message = str(get(wait, "reason")), str(get(wait, "message") or message)
    deleting = get(metadata, "deletionTimestamp", "deletion_timestamp") is not None
    return DriverPod(pod_name, phase, reason, message.strip(), deleting)


class KubernetesApi:
    """The two calls the launcher makes, through the `kubernetes` client package."""

    def __init__(self) -> None:
        try:
            from kubernetes import client, config
        except ImportError:
            raise UsageError("watching a driver pod needs the kubernetes client",
                             hint="pip install apache-airflow-providers-cncf-kubernetes (it brings it)") from None
        try:
            config.load_incluster_config()
        except config.ConfigException:
            try:
                config.load_kube_config()
            except (config.ConfigException, OSError) as exc:
                raise UsageError(f"no Kubernetes configuration to watch driver pods with: {exc}",
                                 hint="run on the cluster (a service account) or give this worker a kubeconfig"
                                 ) from None
        self.core = client.CoreV1Api()

    def pod(self, namespace: str, name: str) -> DriverPod:
        from kubernetes.client.exceptions import ApiException

        try:
            return driver_pod_from_api(name, self.core.read_namespaced_pod(name, namespace).to_dict())
        except ApiException as exc:
            if exc.status == 404:
                return driver_pod_from_api(name, None)
            raise TransientError(f"the Kubernetes API answered {exc.status} for pod {namespace}/{name}") from None

    def delete(self, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise TransientError(f"the Kubernetes API refused to delete pod {namespace}/{name} ({exc.status})"
                                     ) from None
