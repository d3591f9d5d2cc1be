"""The JVMs a cluster starts for an application, with and without Spark's class data sharing
archive (dev/spark_cds.py): a small application (tests/apps/count.py: two tasks) submitted to
the stack's YARN in cluster mode (its application master, which drives, and one executor)
and to a standalone cluster (two executors), each way alternately, in the same run. What is
measured is the CPU of the cluster's containers or executors, read from the NodeManager's and
the workers' reaped children (/proc cutime and cstime), not the submitting spark-submit.

    .venv/bin/python benchmarks/cluster_cds_bench.py [--runs 2]

Needs `make setup` (the YARN jars and the archive of the main line's Spark).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dev import spark_cds, spark_versions  # noqa: E402
from dev import stack as stack_mod  # noqa: E402

APP = REPO / "tests" / "apps" / "count.py"
REAPED_SETTLE_S = 5.0  # the cluster reaps an ended container's processes a moment after the application ends


def reaped_cpu(pattern: str) -> float:
    """CPU seconds of the reaped children (and theirs) of the processes whose command line
    matches `pattern`: this run's own clusters, named by their state directories (another
    run's clusters on the machine are not counted)."""
    pids = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return total


def submit_cpu(args: list[str], env: dict[str, str], pattern: str) -> float:
    before = reaped_cpu(pattern)
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    time.sleep(REAPED_SETTLE_S)
    return reaped_cpu(pattern) - before


def confs(conf: dict[str, str]) -> list[str]:
    return [a for key, value in conf.items() for a in ("--conf", f"{key}={value}")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    main_line = spark_versions.get(spark_versions.MAIN_LINE).require()
    if not spark_cds.archive_path(main_line.spark_home).is_file():
        raise SystemExit("error: no class data sharing archive of the main line's Spark; run `make setup`")
    submit = [str(main_line.spark_submit), "--conf", "spark.ui.enabled=false"]
    env = main_line.env({**os.environ, "SPARK_SUBMIT_OPTS": spark_cds.jvm_opts()})
    cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="cluster-cds-bench-") as tmp:
        work = Path(tmp)
        yarn = stack_mod.start_yarn_cluster(work / "yarn")
        master = stack_mod.start_spark_cluster(work / "standalone")
        try:
            yarn_env = {**env, **yarn.env()}
            with_archive = yarn.pyspark_conf(work / "staging")
            without = {**{k: v for k, v in with_archive.items() if not k.endswith("extraClassPath")},
                       **{f"spark.{s}.extraJavaOptions": stack_mod.SHORT_LIVED_JVM for s in ("driver", "executor", "yarn.am")}}
            standalone = [*submit, "--master", master, "--conf", "spark.driver.host=127.0.0.1",
                          "--conf", "spark.executor.memory=512m"]
            cases: dict[str, Callable[[], float]] = {
                "YARN, without": lambda: submit_cpu(
                    [*submit, "--master", "yarn", "--deploy-mode", "cluster", *confs(without), str(APP)], yarn_env,
                    str(work / "yarn")),
                "YARN, with": lambda: submit_cpu(
                    [*submit, "--master", "yarn", "--deploy-mode", "cluster", *confs(with_archive), str(APP)], yarn_env,
                    str(work / "yarn")),
                "standalone, without": lambda: submit_cpu(
                    [*standalone, "--conf", f"spark.executor.extraJavaOptions={stack_mod.SHORT_LIVED_JVM}", str(APP)],
                    env, str(work / "standalone")),
                "standalone, with": lambda: submit_cpu(
                    [*standalone, "--conf", f"spark.executor.extraJavaOptions={spark_cds.cluster_jvm_opts()}", str(APP)],
                    env, str(work / "standalone")),
            }
            for _ in range(args.runs):
                for name, run in cases.items():
                    cpu.setdefault(name, []).append(run())
        finally:
            stack_mod.stop_spark_cluster(work / "standalone")
            stack_mod.stop_yarn_cluster(work / "yarn")
    for name, values in cpu.items():
        print(f"{name:20} {statistics.median(values):5.1f} CPU-s of the cluster's JVMs (median of {args.runs})")
    for where in ("YARN", "standalone"):
        ratio = statistics.median(cpu[f"{where}, with"]) / statistics.median(cpu[f"{where}, without"])
        print(f"{where}: with the archive / without: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
