"""dev/spark_versions.py without Spark: the lines it knows are the ones `make setup` builds,
each line's pins agree, and a driver started with a line's spark-submit gets that line's
Python and SPARK_HOME whatever the caller's environment says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dev import spark_versions

REPO = Path(__file__).resolve().parent.parent


def test_the_supported_lines_are_the_makefiles_and_the_main_venvs() -> None:
    makefile = (REPO / "Makefile").read_text()
    lines = re.search(r"^SPARK_LINES := (.+)$", makefile, re.M)
    assert lines is not None
    assert sorted(lines.group(1).split()) == sorted(spark_versions.EXTRA_LINES)
    assert [v.line for v in spark_versions.SUPPORTED] == ["3.5", "4.0", "4.1", "4.3"]
    assert [v.line for v in spark_versions.SUPPORTED if v.main] == [spark_versions.MAIN_LINE]
    for line in spark_versions.EXTRA_LINES:
        assert (REPO / "dev" / "spark-envs" / f"{line}.in").is_file()
        assert f"<module>jvm/spark-kafka-{line}</module>" in (REPO / "pom.xml").read_text()


@pytest.mark.parametrize("version", spark_versions.SUPPORTED, ids=lambda v: v.line)
def test_each_line_pins_its_own_pyspark_and_a_connector_of_its_scala(version: spark_versions.SparkVersion) -> None:
    assert version.pyspark.startswith(f"{version.line}.")
    assert version.scala == ("2.12" if version.line == "3.5" else "2.13")
    if version.line == "4.3":  # Maven Central has no Spark 4.3 artifact: the newest connector, 4.2.0
        assert version.connector == "4.2.0"
    else:
        assert version.connector == version.pyspark
    lock = REPO / ("requirements.lock" if version.main else f"dev/spark-envs/{version.line}.lock")
    assert f"pyspark=={version.pyspark}\n" in lock.read_text()


def test_a_lines_driver_gets_its_python_and_spark_home_over_the_callers() -> None:
    version = spark_versions.get("3.5.7")
    assert version.line == "3.5"
    inherited = {"SPARK_HOME": "/elsewhere/pyspark", "PYSPARK_PYTHON": "/usr/bin/python3", "PATH": "/usr/bin",
                 "PYTHONHOME": "/opt/python", "VIRTUAL_ENV": "/work/main/.venv", "KEEP": "1"}
    if not version.installed():
        pytest.skip("Spark 3.5 is not installed here: run `make setup`")
    env = version.env(inherited)
    assert env["SPARK_HOME"] == str(version.spark_home) and (version.spark_home / "bin" / "spark-submit").is_file()
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == str(version.python)
    assert env["PATH"].split(":")[0] == str(version.venv / "bin")
    assert env["VIRTUAL_ENV"] == str(version.venv) and "PYTHONHOME" not in env and env["KEEP"] == "1"
    command = version.submit_command("app.py", ["--x"])
    assert command[0] == str(version.spark_submit) and command[-2:] == ["app.py", "--x"]
    assert all(str(version.kafka_jars_dir) in jar for jar in command[command.index("--jars") + 1].split(","))


def test_an_unknown_line_is_refused_with_the_supported_ones() -> None:
    with pytest.raises(spark_versions.SparkVersionError, match=r"supported: 3\.5, 4\.0, 4\.1, 4\.3"):
        spark_versions.get("3.4")
