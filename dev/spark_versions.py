"""Where each Spark line streamstate is tested on lives on this machine.

    .venv/bin/python dev/spark_versions.py [--json]     (each line, its paths, installed or not)

`make setup` makes one virtualenv per extra Spark line (`.venv-spark/<line>`, from
`dev/spark-envs/<line>.lock`: that line's pyspark, what a stream driver and a state job need,
and this package without its dependencies) and fetches each line's Kafka connector jars
(`.jvm/spark-kafka-<line>`); the main `.venv` is the 4.1 line. A `SparkVersion` says where a
line's `spark-submit`, Python, SPARK_HOME and Kafka jars are, and which environment a driver
started with that spark-submit needs: its own Python for the driver and the executors
(PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON) and its own SPARK_HOME (a SPARK_HOME inherited from
another line would make this line's spark-submit run that line's JVM classes).

Nothing here imports pyspark or the engine: the versions come from the lock files and POMs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPARK_VENVS = REPO / ".venv-spark"
MAIN_VENV = REPO / ".venv"
JARS = REPO / ".jvm"
MAIN_LINE = "4.1"


class SparkVersionError(RuntimeError):
    """A line that is not supported, or not installed (the message says what to run)."""


def _pinned(lock: Path, name: str = "pyspark") -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)", lock.read_text(), re.M)
    if not found:
        raise SparkVersionError(f"{lock} pins no {name}")
    return found.group(1)


def _pom_property(pom: Path, name: str, default: Path | None = None) -> str:
    for path in (pom, default):
        if path is None:
            continue
        found = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", path.read_text())
        if found:
            return found.group(1).strip()
    raise SparkVersionError(f"{pom} sets no {name}")


@dataclass(frozen=True)
class SparkVersion:
    """One Spark line: its pinned pyspark, the Kafka connector fetched for it, where it lives."""

    line: str  # "3.5"
    pyspark: str  # the pinned pyspark release, e.g. "3.5.7"
    connector: str  # the spark-sql-kafka-0-10 release in kafka_jars_dir (4.3: 4.2.0, see its POM)
    scala: str  # Scala binary version of both, "2.12" or "2.13"
    venv: Path
    kafka_jars_dir: Path

    @property
    def main(self) -> bool:
        """The line of the main .venv (the engine's own Spark)."""
        return self.line == MAIN_LINE

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.line.split(".")
        return int(major), int(minor)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def spark_home(self) -> Path:
        """The pyspark package directory: a pip-installed Spark's SPARK_HOME (bin/, jars/)."""
        found = sorted(self.venv.glob("lib/python3*/site-packages/pyspark"))
        if not found:
            raise SparkVersionError(f"no pyspark in {self.venv}; run `make setup`")
        return found[0].resolve()

    @property
    def spark_submit(self) -> Path:
        return self.spark_home / "bin" / "spark-submit"

    def kafka_jars(self) -> list[str]:
        """The Kafka connector and what it needs beyond pyspark's own jars."""
        jars = sorted(str(p) for p in self.kafka_jars_dir.glob("*.jar"))
        if not jars:
            raise SparkVersionError(f"no Kafka connector jars in {self.kafka_jars_dir}; run `make setup`")
        return jars

    def installed(self) -> bool:
        try:
            return self.python.is_file() and self.spark_submit.is_file() and bool(self.kafka_jars())
        except SparkVersionError:
            return False

    def require(self) -> SparkVersion:
        """self, or a SparkVersionError saying what is missing."""
        if not self.python.is_file():
            raise SparkVersionError(f"Spark {self.line}: no Python at {self.python}; run `make setup`")
        if not self.spark_submit.is_file():
            raise SparkVersionError(f"Spark {self.line}: no spark-submit at {self.spark_submit}; run `make setup`")
        self.kafka_jars()
        return self

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) for a driver started with this line's
        spark-submit: its Python for the driver and the executors, its SPARK_HOME, its
        virtualenv first on PATH; a PYTHONHOME or another virtualenv's marker is dropped."""
        out = dict(os.environ if base is None else base)
        for key in ("PYTHONHOME", "VIRTUAL_ENV", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS"):
            out.pop(key, None)
        python = str(self.python)
        out.update({
            "SPARK_HOME": str(self.spark_home),
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            "VIRTUAL_ENV": str(self.venv),
            "PATH": os.pathsep.join([str(self.venv / "bin"), out.get("PATH", os.defpath)]),
        })
        if "SPARK_SUBMIT_OPTS" in out:  # this line's class data sharing archive, not another's
            from dev.spark_cds import with_archive_of

            out["SPARK_SUBMIT_OPTS"] = with_archive_of(out["SPARK_SUBMIT_OPTS"], self.spark_home)
        return out

    def submit_command(
        self, application: str, args: Sequence[str] = (), *, master: str = "local[2]",
        conf: Mapping[str, str] | None = None, jars: Sequence[str] | None = None, driver_memory: str = "1g",
    ) -> list[str]:
        """`spark-submit` of `application` with this line's Kafka jars (plus `jars`) on a local
        master bound to loopback, the UI off."""
        confs = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            **(conf or {}),
        }
        return [
            str(self.spark_submit), "--master", master, "--driver-memory", driver_memory,
            "--jars", ",".join([*self.kafka_jars(), *(jars or ())]),
            *(a for k, v in confs.items() for a in ("--conf", f"{k}={v}")),
            application, *args,
        ]

    def to_json(self) -> dict[str, object]:
        return {
            "line": self.line, "pyspark": self.pyspark, "connector": self.connector, "scala": self.scala,
            "main": self.main, "venv": str(self.venv), "python": str(self.python),
            "spark_submit": str(self.spark_submit) if self.installed() else None,
            "kafka_jars_dir": str(self.kafka_jars_dir), "installed": self.installed(),
        }


def _extra_line(line: str) -> SparkVersion:
    pom = REPO / "jvm" / f"spark-kafka-{line}" / "pom.xml"
    return SparkVersion(
        line=line,
        pyspark=_pinned(REPO / "dev" / "spark-envs" / f"{line}.lock"),
        connector=_pom_property(pom, "spark.version"),
        scala=_pom_property(pom, "scala.binary.version"),
        venv=SPARK_VENVS / line,
        kafka_jars_dir=JARS / f"spark-kafka-{line}",
    )


def _main_line() -> SparkVersion:
    pom = REPO / "jvm" / "spark-kafka" / "pom.xml"
    return SparkVersion(
        line=MAIN_LINE,
        pyspark=_pinned(REPO / "requirements.lock"),
        connector=_pom_property(pom, "spark.version", REPO / "pom.xml"),
        scala=_pom_property(pom, "scala.binary.version", REPO / "pom.xml"),
        venv=MAIN_VENV,
        kafka_jars_dir=JARS / "spark-kafka",
    )


EXTRA_LINES = ("3.5", "4.0", "4.3")  # Makefile's SPARK_LINES
SUPPORTED: list[SparkVersion] = sorted([*(_extra_line(x) for x in EXTRA_LINES), _main_line()],
                                       key=lambda v: v.major_minor)


def get(line: str) -> SparkVersion:
    """The supported line `line` ("3.5"; a release such as "3.5.7" names its line)."""
    wanted = ".".join(line.split(".")[:2])
    for version in SUPPORTED:
        if version.line == wanted:
            return version
    raise SparkVersionError(f"Spark {line} is not a supported line; supported: {', '.join(v.line for v in SUPPORTED)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.json:
        print(json.dumps([v.to_json() for v in SUPPORTED], indent=2))
        return 0
    for v in SUPPORTED:
        state = "installed" if v.installed() else "missing (make setup)"
        print(f"Spark {v.line}: pyspark {v.pyspark}, Kafka connector {v.connector} (Scala {v.scala}), "
              f"{v.venv.relative_to(REPO)}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
