"""The Kubernetes half of cluster deploy mode, as far as it can be checked without a
cluster: the launcher names the driver pod (DNS-1123, unique per launch) and submits with
what a pod-run driver needs, and the pod's phase, container state and deletion map onto the
launcher's states with the pod's own words as the last error. The pod documents are shaped
as the API returns them (`V1Pod.to_dict()`); the API is a stand-in."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.managers import kubernetes, manager_for
from airflow_provider_streamstate.engine.streams.managers.kubernetes import (
    DriverPod,
    driver_pod_from_api,
    driver_pod_name,
    namespace_of,
    submission_confs,
)
from airflow_provider_streamstate.engine.streams.records import DriverRecord, read_launch, write_driver

DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(("command", "manager", "on_cluster"), [
    (["--master", "k8s://https://api:6443", "--deploy-mode", "cluster"], "kubernetes", True),
    (["--master", "k8s://https://api:6443", "--deploy-mode", "client"], "kubernetes", False),
    (["--master", "yarn", "--deploy-mode", "cluster"], "yarn", True),
])
def test_cluster_mode_on_kubernetes_is_told_from_the_command(command: list[str], manager: str,
                                                             on_cluster: bool) -> None:
    cmd = ["spark-submit", *command, "app.py"]
    assert (manager_for(cmd).name, manager_for(cmd).driver_on_cluster(cmd)) == (manager, on_cluster)


def test_driver_pod_names_are_valid_dns_labels_unique_per_launch() -> None:
    a = driver_pod_name("Orders_EU.v2", "20261125T101500Z-1a2b3c4d")
    b = driver_pod_name("Orders_EU.v2", "20261125T101501Z-5e6f7a8b")
    long = driver_pod_name("x" * 200, "20261125T101500Z-1a2b3c4d")
    for name in (a, b, long):
        assert DNS_1123.match(name) and len(name) <= 63, name
    assert a != b and a.startswith("orders-eu-v2-driver-")


def test_the_submission_returns_at_once_names_the_pod_and_gives_the_driver_its_settings() -> None:
    confs = submission_confs("orders-driver-x", {"STREAMSTATE_CHECKPOINT": "s3a://b/c", "STREAMSTATE_LAUNCH_ID": "L"})
    assert confs == [("spark.kubernetes.submission.waitAppCompletion", "false"),
                     ("spark.kubernetes.driver.pod.name", "orders-driver-x"),
                     ("spark.kubernetes.driverEnv.STREAMSTATE_CHECKPOINT", "s3a://b/c"),
                     ("spark.kubernetes.driverEnv.STREAMSTATE_LAUNCH_ID", "L")]
    assert namespace_of(["spark-submit", "--conf", "spark.kubernetes.namespace=streams"]) == "streams"
    assert namespace_of(["spark-submit"]) == "default"


def pod(phase: str, *, waiting: str | None = None, terminated: dict[str, Any] | None = None,
        deleting: bool = False) -> dict[str, Any]:
    state: dict[str, Any] = {"running": None, "waiting": None, "terminated": None}
    if waiting:
        state["waiting"] = {"reason": waiting, "message": f"{waiting} message"}
    if terminated:
        state["terminated"] = terminated
    return {"metadata": {"name": "p", "deletion_timestamp": "2026-11-25T10:00:00Z" if deleting else None},
            "status": {"phase": phase, "container_statuses": [{"name": "spark-kubernetes-driver", "state": state}]}}


@pytest.mark.parametrize(("doc", "expected", "error"), [
    (pod("Pending", waiting="ContainerCreating"), "starting", ""),
    (pod("Pending", waiting="ImagePullBackOff"), "failed", "ImagePullBackOff message"),
    (pod("Running"), "running", ""),
    (pod("Succeeded", terminated={"exit_code": 0, "reason": "Completed"}), "stopped", "exit code 0"),
    (pod("Failed", terminated={"exit_code": 1, "reason": "Error", "message": "StreamingQueryException: boom"}),
     "failed", "StreamingQueryException: boom"),
    (pod("Failed", terminated={"exit_code": 137, "reason": "OOMKilled"}), "dead", "exit code 137"),
    (pod("Running", deleting=True), "running", ""),  # terminating: holds the checkpoint until it is gone
    (None, "dead", "the driver pod does not exist (deleted, or never created)"),
])
def test_pod_states_map_onto_the_launchers(doc: dict[str, Any] | None, expected: str, error: str) -> None:
    driver = driver_pod_from_api("p", doc)
    assert driver.stream_state() == expected
    assert driver.diagnostics == error


class _FakeApi:
    pods: dict[str, DriverPod] = {}
    deleted: list[str] = []

    def pod(self, namespace: str, name: str) -> DriverPod:
        return self.pods.get(f"{namespace}/{name}") or driver_pod_from_api(name, None)

    def delete(self, namespace: str, name: str) -> None:
        self.deleted.append(f"{namespace}/{name}")
        self.pods.pop(f"{namespace}/{name}", None)  # gone at once (no grace period here)


def test_a_cluster_launch_on_kubernetes_records_its_pod_reads_it_and_deletes_it_when_the_stop_is_not_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubernetes, "KubernetesApi", _FakeApi)
    submit = tmp_path / "spark-submit"
    submit.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    submit.chmod(0o755)
    checkpoint = tmp_path / "ckpt"
    handle = launcher.launch([str(submit), "--master", "k8s://https://api:6443", "--deploy-mode", "cluster",
                              "--conf", "spark.kubernetes.namespace=streams", "supervised.py", "app.py"],
                             stream="orders", checkpoint=checkpoint)
    record = read_launch(checkpoint)
    assert record.cluster is not None and record.cluster.manager == "kubernetes"
    pod_name = record.cluster.pod
    assert (record.cluster.namespace, pod_name) == ("streams", driver_pod_name("orders", handle.launch_id))
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert f"spark.kubernetes.driver.pod.name={pod_name}" in argv
    assert f"spark.kubernetes.driverEnv.STREAMSTATE_CHECKPOINT={checkpoint}" in argv

    _FakeApi.pods = {}
    _FakeApi.deleted = []
    assert launcher.status(checkpoint).state == "starting"  # spark-submit has not made the pod yet
    _FakeApi.pods = {f"streams/{pod_name}": driver_pod_from_api(pod_name, pod("Running"))}
    assert launcher.status(checkpoint).state == "starting"  # running pod, no beat yet
    result = launcher.stop(checkpoint, timeout_s=1, poll_s=0.1)
    assert result.outcome == "killed" and _FakeApi.deleted == [f"streams/{pod_name}"]
    # Gone, and the driver never said it ran: dead only once the start grace has passed.
    write_driver(checkpoint, DriverRecord(handle.launch_id, "pod", 1, handle.started_at))
    assert launcher.status(checkpoint).state == "dead"
