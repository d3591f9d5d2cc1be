"""A stream on YARN is seen and stopped through the ResourceManager's REST API: its states
map onto the launcher's, the ResourceManager is found in the yarn-site.xml spark-submit
reads (HA pairs, HTTPS, `${...}` references), the submitted application id is read from
spark-submit's output, and the API's answers (404, 403, a standby's redirect) become clear
errors. The documents are the ones a real ResourceManager (Hadoop 3.4.2) returned; the
integration tests run against the stack's real YARN cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.core.errors import NotFoundError, TransientError, UsageError
from airflow_provider_streamstate.engine.streams.managers.yarn import (
    ResourceManager,
    YarnApp,
    resource_manager_urls,
    submitted_app_id,
)
from tests.unit.fake_yarn import APP, FakeRM


@pytest.mark.parametrize(("state", "final", "expected"), [
    ("ACCEPTED", "UNDEFINED", "starting"),
    ("SUBMITTED", "UNDEFINED", "starting"),
    ("RUNNING", "UNDEFINED", "running"),
    ("FINISHED", "SUCCEEDED", "stopped"),
    ("FINISHED", "FAILED", "failed"),
    ("FAILED", "FAILED", "failed"),
    ("KILLED", "KILLED", "dead"),
])
def test_application_states_map_onto_the_launchers(state: str, final: str, expected: str) -> None:
    app = YarnApp(APP, state, final, "", None, None, "root")
    assert app.stream_state() == expected
    assert app.ended == (state in ("FINISHED", "FAILED", "KILLED"))


def test_the_application_id_is_read_from_spark_submits_output() -> None:
    out = ("25/11/25 10:00:01 INFO Client: Uploading resource file:/tmp/x.zip\n"
           f"25/11/25 10:00:03 INFO Client: Submitted application {APP}\n"
           f"25/11/25 10:00:04 INFO Client: Application report for {APP} (state: ACCEPTED)\n")
    assert submitted_app_id(out) == APP
    assert submitted_app_id("no application here") is None


def _site(path: Path, props: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    (path / "yarn-site.xml").write_text(f"<?xml version='1.0'?><configuration>{body}</configuration>")
    return path


def test_the_resource_manager_is_found_where_spark_submit_finds_it(tmp_path: Path) -> None:
    plain = _site(tmp_path / "plain", {"yarn.resourcemanager.hostname": "rm.example",
                                       "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:8088"})
    assert resource_manager_urls({"HADOOP_CONF_DIR": str(plain), "YARN_CONF_DIR": ""}) == ["http://rm.example:8088"]
    ha = _site(tmp_path / "ha", {"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
                                 "yarn.resourcemanager.hostname.rm1": "a", "yarn.resourcemanager.hostname.rm2": "b",
                                 "yarn.http.policy": "HTTPS_ONLY"})
    assert resource_manager_urls({"YARN_CONF_DIR": str(ha)}) == ["https://a:8090", "https://b:8090"]
    assert resource_manager_urls({"YARN_CONF_DIR": "", "HADOOP_CONF_DIR": str(tmp_path / "none")}) == []


def test_in_a_yarn_container_the_configuration_spark_submit_shipped_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver in cluster deploy mode reads the client's configuration, which Spark ships
    into the container's `__spark_conf__/__hadoop_conf__`, before the node's own."""
    node = _site(tmp_path / "node", {"yarn.resourcemanager.webapp.address": "node-rm:8088"})
    container = tmp_path / "container"
    _site(container / "__spark_conf__" / "__hadoop_conf__", {"yarn.resourcemanager.webapp.address": "client-rm:8088"})
    monkeypatch.chdir(container)
    assert resource_manager_urls({"HADOOP_CONF_DIR": str(node)}) == ["http://client-rm:8088"]
    monkeypatch.chdir(tmp_path)  # anywhere else: only the environment's
    assert resource_manager_urls({"HADOOP_CONF_DIR": str(node)}) == ["http://node-rm:8088"]


def test_an_application_is_read_and_killed_as_the_submitting_user_from_the_first_rm_that_answers(fake_rm: str) -> None:
    rm = ResourceManager(["http://127.0.0.1:9", fake_rm], user="streams", timeout_s=2)  # the first is down
    app = rm.app(APP)
    assert (app.state, app.stream_state(), app.user) == ("RUNNING", "running", "root")
    rm.kill(APP)
    assert FakeRM.seen[-1] == f'PUT /ws/v1/cluster/apps/{APP}/state?user.name=streams {{"state": "KILLED"}}'
    killed = rm.app(APP)
    assert killed.stream_state() == "dead" and "killed by user root" in killed.diagnostics


def test_the_apis_refusals_are_errors_that_say_what_to_do(fake_rm: str) -> None:
    rm = ResourceManager(fake_rm, timeout_s=2)
    with pytest.raises(NotFoundError, match="does not know application_1_2"):
        rm.app("application_1_2")
    with pytest.raises(UsageError, match="refused GET .*403") as refused:
        rm.app("application_1_403")
    assert "administer ACL" in refused.value.one_line()
    with pytest.raises(UsageError, match="is not a YARN application id"):
        rm.app("../../cluster")
    with pytest.raises(TransientError, match="no YARN ResourceManager answered"):
        ResourceManager("http://127.0.0.1:9", timeout_s=1).app(APP)
