"""A launch in YARN cluster mode: the launcher adds what a driver on the cluster needs
(spark-submit returns once submitted; the STREAMSTATE_* settings reach the application
master's environment), records the application id spark-submit printed beside the
checkpoint, reads the stream's state from the ResourceManager, and stops it there when the
graceful stop does not end it. spark-submit is a stand-in that prints what the real one
does; the ResourceManager the stand-in of tests/unit/fake_yarn.py. The real cluster runs in
tests/integration/test_yarn_cluster.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.core.errors import TransientError, UsageError
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.managers import manager_for
from airflow_provider_streamstate.engine.streams.records import read_launch
from tests.unit.fake_yarn import APP, FakeRM


@pytest.mark.parametrize(("command", "cluster"), [
    (["spark-submit", "--master", "yarn", "--deploy-mode", "cluster", "app.py"], True),
    (["spark-submit", "--master=yarn", "--deploy-mode=cluster", "app.py"], True),
    (["spark-submit", "--master", "yarn", "--deploy-mode", "client", "app.py"], False),
    (["spark-submit", "--master", "yarn", "app.py"], False),
    (["spark-submit", "--master", "spark://m:7077", "app.py"], False),
])
def test_cluster_mode_on_yarn_is_told_from_the_command(command: list[str], cluster: bool) -> None:
    manager = manager_for(command)
    assert manager.driver_on_cluster(command) is cluster
    assert manager.name == ("yarn" if "yarn" in command or "--master=yarn" in command else "standalone")


def test_cluster_mode_on_a_standalone_master_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """Spark runs no Python application in cluster deploy mode on a standalone master."""
    command = [str(_submitter(tmp_path, APP)), "--master", "spark://m:7077", "--deploy-mode", "cluster", "app.py"]
    with pytest.raises(UsageError, match="standalone has no cluster deploy mode for Python applications"):
        launcher.launch(command, stream="orders", checkpoint=tmp_path / "ckpt")
    assert not (tmp_path / "argv.json").exists() and read_launch(tmp_path / "ckpt") is None


def _submitter(tmp_path: Path, app_id: str | None, code: int = 0) -> Path:
    """A spark-submit that records its arguments, prints what the real one prints, exits."""
    script = tmp_path / "spark-submit"
    said = f"print('INFO Client: Submitted application {app_id}')" if app_id else "print('error: no queue')"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                      f"{said}\nsys.exit({code})\n")
    script.chmod(0o755)
    return script


def _conf_dir(tmp_path: Path, rm: str) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
        f"<value>{rm.removeprefix('http://')}</value></property></configuration>")
    return conf


def test_a_cluster_launch_records_its_application_and_reads_and_stops_it_through_the_resource_manager(
    tmp_path: Path, fake_rm: str
) -> None:
    checkpoint = tmp_path / "ckpt"
    submit = _submitter(tmp_path, APP)
    env = {"HADOOP_CONF_DIR": str(_conf_dir(tmp_path, fake_rm)), "YARN_CONF_DIR": ""}
    handle = launcher.launch([str(submit), "--master", "yarn", "--deploy-mode", "cluster", "supervised.py", "app.py"],
                             stream="orders", checkpoint=checkpoint, env=env)
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:2] == ["--conf", "spark.yarn.submit.waitAppCompletion=false"]
    assert f"spark.yarn.appMasterEnv.STREAMSTATE_CHECKPOINT={checkpoint}" in argv
    assert "spark.yarn.appMasterEnv.STREAMSTATE_LAUNCH_GENERATION=1" in argv
    assert f"spark.yarn.appMasterEnv.STREAMSTATE_LAUNCH_ID={handle.launch_id}" in argv
    record = read_launch(checkpoint)
    assert record.cluster is not None and (record.cluster.app_id, record.cluster.rm_urls) == (APP, [fake_rm])

    st = launcher.status(checkpoint)  # running per YARN; no beat yet: starting
    assert st.state == "starting" and st.app is not None and st.app.state == "RUNNING"
    assert st.process_alive is None and st.log == FakeRM.apps[APP]["amContainerLogs"]
    with pytest.raises(Exception, match="a driver is starting"):
        launcher.launch([str(submit), "--master", "yarn", "--deploy-mode", "cluster", "app.py"], stream="orders",
                        checkpoint=checkpoint, env=env)

    result = launcher.stop(checkpoint, timeout_s=1, poll_s=0.1)  # the stand-in driver never honours it
    assert result.outcome == "killed" and f"killed {APP} through the cluster manager" in result.detail[-1]
    assert any(line.startswith(f"PUT /ws/v1/cluster/apps/{APP}/state?user.name=") for line in FakeRM.seen)
    dead = launcher.status(checkpoint)
    assert dead.state == "dead" and "was killed by user" in (dead.last_error or "")


def test_a_driver_the_cluster_has_not_started_in_time_says_what_the_cluster_says(
    tmp_path: Path, fake_rm: str
) -> None:
    """An application YARN keeps ACCEPTED (a full queue) times out naming YARN's reason."""
    FakeRM.apps[APP] = {**FakeRM.apps[APP], "state": "ACCEPTED", "diagnostics":
                        "[Fri Nov 27 05:50:40 +0000 2026] Application is added to the scheduler and is not yet "
                        "activated. Queue's AM resource limit exceeded.\n Details : AM Partition = <DEFAULT>"}
    env = {"HADOOP_CONF_DIR": str(_conf_dir(tmp_path, fake_rm)), "YARN_CONF_DIR": ""}
    handle = launcher.launch([str(_submitter(tmp_path, APP)), "--master", "yarn", "--deploy-mode", "cluster",
                              "app.py"], stream="orders", checkpoint=tmp_path / "ckpt", env=env)
    with pytest.raises(TransientError, match=r"within 1s \(state starting\); the cluster says: .*Queue's AM "
                                             r"resource limit exceeded\. Details : AM Partition"):
        launcher.wait_until_running(handle, timeout_s=1, poll_s=0.2)


def test_a_cluster_launch_that_spark_submit_could_not_submit_fails_with_its_error_line(
    tmp_path: Path, fake_rm: str
) -> None:
    env = {"HADOOP_CONF_DIR": str(_conf_dir(tmp_path, fake_rm)), "YARN_CONF_DIR": ""}
    with pytest.raises(launcher.StreamStartError, match="exited 1 without submitting it: error: no queue"):
        launcher.launch([str(_submitter(tmp_path, None, code=1)), "--master", "yarn", "--deploy-mode", "cluster",
                         "app.py"], stream="orders", checkpoint=tmp_path / "ckpt", env=env)


def test_cluster_mode_without_the_clusters_configuration_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    with pytest.raises(UsageError, match="needs the cluster's configuration"):
        launcher.launch([str(_submitter(tmp_path, APP)), "--master", "yarn", "--deploy-mode", "cluster", "app.py"],
                        stream="orders", checkpoint=tmp_path / "ckpt")
    assert not (tmp_path / "argv.json").exists()
    assert read_launch(tmp_path / "ckpt") is None
