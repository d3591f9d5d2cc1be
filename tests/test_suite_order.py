"""The suite's order: per-file seconds from a JUnit report (dev/test_durations.py), and the
longest files first with each file's tests kept together (tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _dev_module(name: str):  # noqa: ANN202 - a dev script, loaded by path
    spec = importlib.util.spec_from_file_location(name, REPO / "dev" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _durations_module():  # noqa: ANN202
    return _dev_module("test_durations")


def test_a_junit_report_gives_seconds_per_file_classes_included(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_a" name="t1" time="10.5"/>'
        '<testcase classname="tests.integration.test_a" name="t2" time="4.5"/>'
        '<testcase classname="tests.integration.test_b.TestGroup" name="t3" time="30"/>'
        '<testcase classname="tests.test_c" name="t4" time="2"/>'
        '<testcase classname="conftest" name="collect" time="9"/>'
        "</testsuite></testsuites>"
    )
    durations = _durations_module().file_durations(report)
    assert durations == {"tests/integration/test_b.py": 30.0, "tests/integration/test_a.py": 15.0,
                         "tests/test_c.py": 2.0}
    assert list(durations) == ["tests/integration/test_b.py", "tests/integration/test_a.py", "tests/test_c.py"]


def test_the_recorded_durations_name_files_that_exist() -> None:
    recorded = json.loads((REPO / "tests" / "durations.json").read_text())
    missing = [f for f in recorded if not (REPO / f).is_file()]
    assert recorded and not missing, f"tests/durations.json names files that are gone: {missing}"


def test_the_collected_suite_runs_the_longest_files_first_each_file_together(pytestconfig) -> None:  # noqa: ANN001
    recorded = json.loads((REPO / "tests" / "durations.json").read_text())
    session_items = pytestconfig.pluginmanager.getplugin("session").items  # type: ignore[union-attr]
    files = [Path(str(i.path)).relative_to(REPO).as_posix() for i in session_items]
    order = list(dict.fromkeys(files))
    runs = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert runs == order, "a file's tests were split"
    weights = [recorded.get(f, -1.0) for f in order]
    assert weights == sorted(weights, reverse=True), order


def test_the_run_summary_gives_the_total_work_and_the_heaviest_files_with_their_share(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_a" name="t1" time="60"/>'
        '<testcase classname="tests.integration.test_a" name="t2" time="15"/>'
        '<testcase classname="tests.integration.test_b" name="t3" time="20"><skipped/></testcase>'
        '<testcase classname="tests.test_c" name="t4" time="5"/>'
        "</testsuite></testsuites>"
    )
    text = _durations_module().summary(report, wall_s=50, top=2)
    assert text.splitlines() == [
        "test work: 4 tests (1 skipped), 100 s of work in 50 s (2.00 tests running on average)",
        "the 2 heaviest files (seconds of work, share):",
        "      75.0   75.0%  tests/integration/test_a.py",
        "      20.0   20.0%  tests/integration/test_b.py",
    ]


def test_a_test_that_uses_a_component_without_its_marker_is_named() -> None:
    from types import SimpleNamespace

    from tests.components import unmarked_components

    def item(nodeid: str, fixtures: list[str], marks: list[str]) -> SimpleNamespace:
        return SimpleNamespace(nodeid=nodeid, fixturenames=fixtures,
                               get_closest_marker=lambda name: name if name in marks else None)

    items = [item("a", ["stack", "yarn", "hdfs"], ["yarn"]), item("b", ["private_regions"], ["dr_regions"]),
             item("c", ["spark"], [])]
    assert [(i.nodeid, m) for i, m in unmarked_components(items)] == [("a", "hdfs")]  # type: ignore[arg-type]


def test_a_test_using_a_component_without_its_marker_fails_naming_the_marker() -> None:
    """As a failure of that test at setup, not a collection error (an xdist worker whose
    collection hook raises ends its session silently, and the run stops with an internal
    error naming nothing): the collection hook marks it, the autouse fixture fails it."""
    from types import SimpleNamespace

    from tests import conftest

    marks: dict[str, pytest.Mark] = {}
    unmarked = SimpleNamespace(nodeid="t::unmarked", fixturenames=["hdfs"], get_closest_marker=marks.get,
                               add_marker=lambda m: marks.setdefault(m.name, m.mark), path="t.py",
                               iter_markers=lambda: iter(()))
    marked = SimpleNamespace(nodeid="t::marked", fixturenames=["hdfs"], get_closest_marker=lambda n: n == "hdfs" or None,
                             add_marker=lambda m: pytest.fail("a marked test was marked unmarked"), path="t.py",
                             iter_markers=lambda: iter(()))
    config = SimpleNamespace(rootpath="/nowhere", stash={})
    conftest.pytest_collection_modifyitems(config, [unmarked, marked])  # type: ignore[arg-type, list-item]
    assert list(marks) == ["unmarked_component"]
    check = conftest._component_marked.__wrapped__  # type: ignore[attr-defined]
    with pytest.raises(pytest.fail.Exception, match=r"t::unmarked starts the hdfs component: mark it `pytest.mark.hdfs`"):
        check(SimpleNamespace(node=unmarked))
    check(SimpleNamespace(node=marked))


def _cpu_module():  # noqa: ANN202
    return _dev_module("measure")


def test_the_cpu_of_a_tests_child_process_is_charged_to_its_file_and_kind(tmp_path: Path) -> None:
    """A process the run starts (tagged) inside a test is charged to that test's file, and a
    child it starts (as YARN starts containers, with an environment of their own) too;
    an untagged process is not charged."""
    import os
    import subprocess
    import sys
    import time

    cpu = _cpu_module()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass\n"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], env={{}}); {burn}"
    env = {**os.environ, cpu.TAG_VARIABLE: "t1", "PYTEST_CURRENT_TEST": "tests/integration/test_x.py::test_y (call)"}
    sampler = cpu.Sampler("t1")
    tagged = subprocess.Popen([sys.executable, "-c", child], env=env)
    other = subprocess.Popen([sys.executable, "-c", burn], env={**os.environ, cpu.TAG_VARIABLE: "t2"})
    while tagged.poll() is None or other.poll() is None:
        sampler.sample()
        time.sleep(0.05)
    report = sampler.report()
    assert 1.2 <= report["by_file"]["tests/integration/test_x.py"] <= 1.8, report
    assert set(report["by_file"]) == {"tests/integration/test_x.py"}
    assert set(report["by_kind"]) == {"other python (stream apps' drivers, CLI runs, jobs)"}
    assert report["processes_by_kind"] == {"other python (stream apps' drivers, CLI runs, jobs)": 2}


def test_the_in_process_spark_sessions_cpu_is_charged_to_the_test_its_worker_runs_now() -> None:
    """The worker's Spark session JVM (a `pyspark-shell` child) serves every test the worker
    runs after the one that started it: its CPU goes to the test the worker's title names at
    each sample."""
    import os
    import subprocess
    import sys
    import textwrap
    import time

    cpu = _cpu_module()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass\n"
    worker = textwrap.dedent(f"""
        import subprocess, sys, time, setproctitle
        setproctitle.setproctitle("[pytest-xdist running] tests/integration/test_first.py::t")
        gateway = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)\\n" + {burn!r},
                                    "pyspark-shell"])
        time.sleep(0.6)
        setproctitle.setproctitle("[pytest-xdist running] tests/integration/test_later.py::t")
        gateway.wait()
    """)
    env = {**os.environ, cpu.TAG_VARIABLE: "t3", "PYTEST_CURRENT_TEST": "tests/integration/test_first.py::t (call)"}
    sampler = cpu.Sampler("t3")
    proc = subprocess.Popen([sys.executable, "-c", worker], env=env)
    while proc.poll() is None:
        sampler.sample()
        time.sleep(0.05)
    by_file = sampler.report()["by_file"]
    assert by_file.get("tests/integration/test_later.py", 0) >= 0.6, by_file
    assert by_file.get("tests/integration/test_first.py", 0) < 0.3, by_file


def test_a_fork_of_a_driver_seen_before_it_execs_is_not_counted_as_a_driver() -> None:
    """A Spark driver's JVM forks thousands of short processes (Hadoop's `readlink`, `chmod`);
    one sampled before its exec has the driver's command line and no CPU of its own."""
    cpu = _cpu_module()
    sampler = cpu.Sampler("t4")
    driver_cmd = ["java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit", "app.py"]
    for pid, used in ((101, 6.0), (102, 0.0), (103, 0.01)):
        sampler.known[(pid, 1)] = {"cpu": used, "kind": cpu.kind_of(driver_cmd), "cmd": driver_cmd,
                                   "file": "tests/integration/test_a.py", "test": "tests/integration/test_a.py::t",
                                   "follows": None}
    report = sampler.report()
    assert report["spark_drivers_by_file"] == {"tests/integration/test_a.py": 1}
    assert report["spark_drivers_by_test"] == {"tests/integration/test_a.py::t": 1}
    assert report["processes_by_kind"] == {"fork of a JVM, seen before its exec": 2, "spark driver": 1}


def test_the_python_processes_are_summed_by_program_and_each_kind_lists_its_costliest() -> None:
    """Many short Python processes (CLI runs, drivers' Python sides) add up where no single one
    shows: the report sums them by the script or module they ran."""
    cpu = _cpu_module()
    sampler = cpu.Sampler("t5")
    runs = [(["/v/bin/python", "/v/bin/streamstate", "snapshot"], 0.5), (["/v/bin/python", "/v/bin/streamstate"], 0.25),
            (["python", "-m", "airflow_provider_streamstate.cli", "rescale"], 2.0),
            (["/v/bin/python", "/repo/airflow_provider_streamstate/jobs/supervised.py", "app.py"], 4.0)]
    for pid, (cmd, used) in enumerate(runs, start=200):
        sampler.known[(pid, 1)] = {"cpu": used, "kind": cpu.kind_of(cmd), "cmd": cmd,
                                   "file": "tests/integration/test_a.py", "test": "tests/integration/test_a.py::t",
                                   "follows": None}
    report = sampler.report()
    assert report["python_by_program"] == {"supervised.py": {"processes": 1, "cpu_s": 4.0},
                                           "-m airflow_provider_streamstate.cli": {"processes": 1, "cpu_s": 2.0},
                                           "streamstate": {"processes": 2, "cpu_s": 0.8}}
    costliest = report["costliest_by_kind"][cpu.OTHER_PYTHON]
    assert [c["cpu_s"] for c in costliest] == [4.0, 2.0, 0.5, 0.2]  # 0.25, rounded to a tenth
    assert costliest[0]["test"] == "tests/integration/test_a.py::t" and "supervised.py" in costliest[0]["cmd"]


def test_a_measured_command_keeps_its_exit_code_and_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    import sys

    cpu = _cpu_module()
    out = tmp_path / "cpu.json"
    assert cpu.main(["--json", str(out), "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    report = json.loads(out.read_text())
    assert report["wall_s"] > 0 and "machine_busy_cpu_s" in report and "load_average" in report
    assert capsys.readouterr().out.startswith("measure: ")


def test_processes_are_named_by_what_they_run() -> None:
    cpu = _cpu_module()
    assert cpu.kind_of(["/usr/lib/jvm/bin/java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit", "app.py"]) == "spark driver"
    assert cpu.kind_of(["java", "-Xmx128m", "-cp", "x", "org.apache.spark.launcher.Main", "org.apache.spark.deploy.SparkSubmit",
                        "app.py"]) == "spark-submit's command builder"
    assert cpu.kind_of(["java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit", "--master", "yarn", "--deploy-mode",
                        "cluster", "app.py"]).startswith("spark-submit in cluster mode")
    assert cpu.kind_of(["java", "-cp", "x", "org.apache.spark.deploy.yarn.ApplicationMaster", "--class", "x"]) == \
        "spark driver"
    assert cpu.kind_of(["java", "-cp", "x", "org.apache.spark.executor.CoarseGrainedExecutorBackend"]) == "spark executor"
    assert cpu.kind_of(["/usr/bin/java", "-cp", "k/*", "kafka.Kafka", "kafka.properties"]) == "kafka broker"
    assert cpu.kind_of(["[pytest-xdist running] tests/integration/test_a.py::test_b"]).startswith("pytest")
    assert cpu.kind_of(["python", "-m", "moto.server", "-p", "1"]) == "moto S3"
    assert cpu.kind_of(["python", "dev/moto_server.py", "-p", "1"]) == "moto S3"  # the stack's (dev/stack.py)
    assert cpu._test_file("tests/integration/test_a.py::test_b[p-1] (call)") == "tests/integration/test_a.py"


def test_each_shared_part_is_let_go_after_the_last_file_in_run_order_whose_tests_carry_its_marker() -> None:
    from tests.components import last_users, marker_of_part

    files = [("test_dr.py", {"integration", "dr_regions"}), ("test_yarn.py", {"yarn", "hdfs"}),
             ("test_dr_too.py", {"dr_regions"}), ("test_plain.py", {"integration"}), ("test_s3.py", {"s3proxy"})]
    assert last_users(files) == {"dr_regions": 2, "yarn": 1, "hdfs": 1, "s3proxy": 4}
    assert [marker_of_part(p) for p in ("regions-default", "regions-identity", "yarn", "spark-standalone", "stack")] \
        == ["dr_regions", "dr_regions", "yarn", "spark_standalone", None]
