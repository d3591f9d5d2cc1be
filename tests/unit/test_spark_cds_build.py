"""Building a class data sharing archive (dev/spark_cds.py) survives a training JVM that does
not exit: it is killed with its process group and the training run again; a run that fails
is reported with its error, nothing half-written left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from dev import spark_cds

# A spark-submit stand-in: the first run hangs (as a JVM stuck in its exit), the next writes
# the archive named by -XX:ArchiveClassesAtExit and exits.
SUBMIT = """#!/bin/sh
runs="$SPARK_HOME/runs"
echo run >> "$runs"
if [ "$(wc -l < "$runs")" -le {hangs} ]; then sleep 600; fi
archive=$(printf '%s\\n' $SPARK_SUBMIT_OPTS | sed -n 's/^-XX:ArchiveClassesAtExit=//p')
[ -n "{fail}" ] && {{ echo "training failed: {fail}" >&2; exit 3; }}
echo archive > "$archive"
"""


def spark_home(tmp_path: Path, hangs: int, fail: str = "") -> Path:
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "jars").mkdir()
    (home / "jars" / "spark-core_2.13-9.9.9.jar").write_bytes(b"")
    submit = home / "bin" / "spark-submit"
    submit.write_text(SUBMIT.format(hangs=hangs, fail=fail))
    submit.chmod(0o755)
    return home


@pytest.fixture(autouse=True)
def _quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_cds, "ARCHIVES", tmp_path / "archives")
    monkeypatch.setattr(spark_cds, "ATTEMPT_TIMEOUT_S", 1)


def test_a_training_jvm_that_does_not_exit_is_killed_and_run_again(tmp_path: Path) -> None:
    home = spark_home(tmp_path, hangs=1)
    archive = spark_cds.build("python3", home)
    assert archive.read_text() == "archive\n" and archive.name == f"spark-9.9.9-java-{spark_cds._java_version()}.jsa"
    assert (home / "runs").read_text().count("run") == 2
    assert not archive.with_suffix(".partial").exists()


def test_a_training_run_that_never_ends_fails_after_its_attempts_with_nothing_left(tmp_path: Path) -> None:
    home = spark_home(tmp_path, hangs=spark_cds.ATTEMPTS)
    with pytest.raises(SystemExit, match=f"had not exited after 1 s \\(attempt {spark_cds.ATTEMPTS} of"):
        spark_cds.build("python3", home)
    assert list((tmp_path / "archives").iterdir()) == []


def test_a_failed_training_run_is_reported_with_its_error_and_not_retried(tmp_path: Path) -> None:
    home = spark_home(tmp_path, hangs=0, fail="no Java")
    with pytest.raises(SystemExit, match="training failed: no Java"):
        spark_cds.build("python3", home)
    assert (home / "runs").read_text().count("run") == 1


def test_cluster_jvms_get_the_archive_and_yarn_containers_the_launchers_class_path_first(tmp_path: Path) -> None:
    """The archive is dumped with the class path Spark's launcher writes; a YARN container's
    starts with its working directory, so the launcher's goes first there (extraClassPath,
    cut after Spark's jars). The real launcher of the main line is asked."""
    from dev import spark_versions

    home = spark_versions.get(spark_versions.MAIN_LINE).spark_home
    launcher = spark_cds.launcher_class_path(home)
    assert launcher is not None and launcher.startswith(f"{home}/conf:") and launcher.endswith(f"{home}/jars/*")
    assert spark_cds.yarn_container_confs(home) == {f"spark.{side}.extraJavaOptions": spark_cds.SHORT_LIVED_JVM
                                                    for side in ("driver", "executor", "yarn.am")}  # none built here
    archive = spark_cds.archive_path(home)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    confs = spark_cds.yarn_container_confs(home)
    assert confs["spark.executor.extraClassPath"] == confs["spark.driver.extraClassPath"] == launcher
    assert "spark.yarn.am.extraClassPath" not in confs  # not a Spark conf: the AM takes the driver's
    assert confs["spark.yarn.am.extraJavaOptions"] == spark_cds.cluster_jvm_opts(home)
    assert f"-XX:SharedArchiveFile={archive}" in spark_cds.cluster_jvm_opts(home).split()
    assert spark_cds.INTERPRETED_SQL not in spark_cds.cluster_jvm_opts(home)  # as shipped on clusters
