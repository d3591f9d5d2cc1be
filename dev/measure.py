"""What a command costs: its wall time and the CPU seconds of every process it started,
whether it waited for them or not (a detached stream driver, a stack part, a YARN container),
by test file and by kind of process, and how busy the machine was meanwhile.

    .venv/bin/python dev/measure.py [--top N] [--json OUT] -- .venv/bin/pytest tests/integration/test_launcher.py

On this 2-core machine the suite is bound by CPU (busy ~95% of a run with three workers), so
a test's seconds under load say little about what it costs the run: a test that waits on a
batch for 60 s may use 5 s of CPU, another 60 s. dev/run-tests.sh runs the suite through this.
/proc is read twice a second and each process's CPU (user + system) is charged to a test file
and to a kind of process:

- a pytest process (the xdist workers name their current test in their title) is charged,
  sample by sample, to the test it runs, and so is its in-process Spark session (the
  `pyspark-shell` JVM and its Python workers, which serve every test the worker runs);
- any other process of the command (found by a marker in its environment, which every
  process the suite starts inherits, or as a child of one: YARN's containers get an
  environment of their own) to the test file that started it (`PYTEST_CURRENT_TEST` in its
  environment); a part of the shared stack (Kafka, the S3 endpoints, YARN, HDFS, the
  standalone cluster: their files live under the run's `shared/` directory) to the shared
  parts, and the applications their clusters run apart.

A process that lives less than half a second may be missed, the last half second of one is
counted short, and one that runs on after the command ended (a stack part a later run
reuses) is not counted past it; the report says what share of the machine's busy CPU it
covered. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

TAG_VARIABLE = "STREAMSTATE_MEASURE"
INTERVAL_S = 0.5
DRIVER_MIN_CPU_S = 0.5  # a JVM with Spark's driver class that used less was a fork, not a driver
_TICKS = os.sysconf("SC_CLK_TCK")
SHARED = "shared parts (stack, clusters)"
OUTSIDE = "(outside any test)"
OTHER_PYTHON = "other python (stream apps' drivers, CLI runs, jobs)"
_JAVA_KINDS = (
    # spark-class's command builder, a tenth of a second before each spark-submit: its
    # arguments name SparkSubmit too, so it is told apart first (not a driver).
    ("org.apache.spark.launcher.Main", "spark-submit's command builder"),
    ("org.apache.spark.deploy.SparkSubmit", "spark driver"),
    ("CoarseGrainedExecutorBackend", "spark executor"),
    ("org.apache.spark.deploy.yarn.ApplicationMaster", "spark driver"),
    ("org.apache.spark.deploy.yarn.ExecutorLauncher", "yarn application master"),
    ("org.apache.spark.deploy.master.Master", "spark standalone"),
    ("org.apache.spark.deploy.worker.Worker", "spark standalone"),
    ("kafka.Kafka", "kafka broker"),
    ("MirrorMaker", "mirrormaker 2"),
    ("s3proxy", "s3proxy"),
    ("io.streamstate.dev.YarnCluster", "yarn"),  # MiniYARNCluster (dev/stack.py)
    ("io.streamstate.dev.HdfsCluster", "hdfs"),  # MiniDFSCluster
)


def kind_of(cmd: list[str]) -> str:
    """The kind of process a command line is, for the report."""
    line = " ".join(cmd)
    if _is_pytest(cmd):
        return "pytest (tests, Airflow's dag.test, the engine in process)"
    exe = os.path.basename(cmd[0]) if cmd else ""
    if exe == "java" or exe.startswith("java"):
        kind = next((kind for needle, kind in _JAVA_KINDS if needle in line), "other JVM")
        if kind == "spark driver" and "org.apache.spark.deploy.SparkSubmit" in line and _cluster_mode(cmd):
            return "spark-submit in cluster mode (submits; the driver runs in the cluster)"
        return kind
    if "pyspark.daemon" in line or "pyspark.worker" in line:
        return "spark python workers"
    if "moto.server" in line or "moto_server" in line:
        return "moto S3"
    if exe.startswith("python"):
        return OTHER_PYTHON
    return "other"


def _cluster_mode(cmd: list[str]) -> bool:
    """Whether a spark-submit only submits (its driver is the cluster's application master)."""
    return any(a == "--deploy-mode" and b == "cluster" for a, b in zip(cmd, cmd[1:], strict=False)) or any(
        a in ("--deploy-mode=cluster", "spark.submit.deployMode=cluster") for a in cmd)


def _is_pytest(cmd: list[str]) -> bool:
    line = " ".join(cmd)
    return line.startswith("[pytest-xdist") or "bin/pytest" in line


def _test_file(value: str | None) -> str | None:
    """`tests/x.py` of `tests/x.py::test_y[p] (call)`, or of an xdist title."""
    if not value:
        return None
    m = re.search(r"(tests/\S+?\.py)(::|\s|$)", value)
    return m.group(1) if m else None


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _stat(pid: int) -> tuple[int, int, float]:
    """(parent's pid, start time in ticks, CPU seconds) of a process."""
    stat = _read(f"/proc/{pid}/stat").decode()
    rest = stat[stat.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[19]), (int(rest[11]) + int(rest[12])) / _TICKS


def _cpu_ticks() -> tuple[int, int]:
    """The machine's CPU ticks so far: (busy, i.e. neither idle nor waiting for I/O; all)."""
    fields = _read("/proc/stat").split(b"\n", 1)[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


class Sampler:
    """Charges the CPU of the tagged processes to test files and kinds of process."""

    def __init__(self, tag: str) -> None:
        self.marker = f"{TAG_VARIABLE}={tag}".encode()
        self.known: dict[tuple[int, int], dict[str, Any] | None] = {}  # (pid, start) -> charge, or untagged
        self.live: dict[int, dict[str, Any] | None] = {}  # pid -> its charge, for its children
        self.running: dict[int, str] = {}  # pid of a pytest worker -> the test file it runs now
        self.by_file: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        self.started = time.monotonic()
        self.ticks_before = _cpu_ticks()

    def _first_sight(self, pid: int, parent: int) -> dict[str, Any] | None:
        """The charge of a process of the run (tagged, or a child of one: YARN's containers
        get an environment of their own), or None."""
        env = _read(f"/proc/{pid}/environ")
        parents = self.live.get(parent)
        if self.marker not in env.split(b"\0") and parents is None:
            return None
        cmd = [a.decode(errors="replace") for a in _read(f"/proc/{pid}/cmdline").split(b"\0") if a]
        current = next((v.decode(errors="replace").split("=", 1)[1] for v in env.split(b"\0")
                        if v.startswith(b"PYTEST_CURRENT_TEST=")), None)
        try:
            where = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            where = ""
        if parents is not None and parents["file"] == SHARED:
            file = SHARED if "/shared/" not in where else "applications on the shared clusters (YARN, standalone)"
        elif "/shared/" in " ".join(cmd) or "/shared/" in where:
            file = SHARED
        else:
            file = _test_file(current) or (parents["file"] if parents else OUTSIDE)
        # The in-process Spark session's JVM (and its Python workers) serves whichever test its
        # pytest process runs: charged, sample by sample, to that test, not to the first.
        follows = parents.get("follows") if parents else None
        if parents is not None and _is_pytest(parents["cmd"]) and "pyspark-shell" in cmd:
            follows = parent
        test = current.rsplit(" (", 1)[0] if current else None
        return {"cpu": 0.0, "kind": kind_of(cmd), "cmd": cmd, "file": file, "test": test, "follows": follows}

    def sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                parent, start, cpu = _stat(pid)
                key = (pid, start)
                if key not in self.known:
                    self.known[key] = self._first_sight(pid, parent)
                charge = self.live[pid] = self.known[key]
                if charge is None:
                    continue
                cmd = [a.decode(errors="replace") for a in _read(f"/proc/{pid}/cmdline").split(b"\0") if a]
                if cmd and cmd != charge["cmd"]:  # an exec (spark-submit's shell becomes java), or a new title
                    charge["cmd"], charge["kind"] = cmd, kind_of(cmd)
                title = cmd[0] if cmd and cmd[0].startswith("[pytest-xdist") else None
                if title:
                    self.running[pid] = _test_file(title) or "(pytest between tests)"
                delta, charge["cpu"] = cpu - charge["cpu"], cpu
                if delta <= 0:
                    continue
                if title:
                    where = self.running[pid]
                elif charge["follows"] is not None:
                    where = self.running.get(charge["follows"], charge["file"])
                else:
                    where = charge["file"]
                self.by_file[where] += delta
                self.by_kind[charge["kind"]] += delta
            except (OSError, ValueError, IndexError):
                continue

    def report(self) -> dict[str, Any]:
        (busy_after, all_after), (busy_before, all_before) = _cpu_ticks(), self.ticks_before
        busy, ticks = busy_after - busy_before, all_after - all_before
        charged = sum(self.by_file.values())
        return {"wall_s": round(time.monotonic() - self.started, 1), "machine_busy_cpu_s": round(busy / _TICKS, 1),
                "machine_busy_share": round(busy / ticks, 3) if ticks else 0.0, "cpus": os.cpu_count(),
                "charged_cpu_s": round(charged, 1),
                "by_file": {k: round(v, 1) for k, v in self.by_file.most_common()},
                "by_kind": {k: round(v, 1) for k, v in self.by_kind.most_common()},
                "processes_by_kind": dict(Counter(_counted_kind(c) for c in self.known.values() if c).most_common()),
                "spark_drivers_by_file": dict(Counter(c["file"] for c in self._drivers()).most_common()),
                "spark_drivers_by_test": dict(Counter(c["test"] or c["file"] for c in self._drivers()).most_common()),
                "outside_any_test": self._outside(),
                "costliest_by_kind": self._costliest(),
                "python_by_program": self._python_by_program()}

    def _outside(self, top: int = 8) -> list[dict[str, Any]]:
        """The costliest processes charged to no test (started with no test running and by
        no process of one): what they are, to find where they come from."""
        placed = [c for c in self.known.values() if c and c["file"] == OUTSIDE and c["follows"] is None
                  and not (c["cmd"] and c["cmd"][0].startswith("[pytest-xdist"))]  # workers: charged by their title
        return [{"cpu_s": round(c["cpu"], 1), "kind": c["kind"], "cmd": " ".join(c["cmd"])[:400]}
                for c in sorted(placed, key=lambda c: -c["cpu"])[:top]]

    def _costliest(self, top: int = 12) -> dict[str, list[dict[str, Any]]]:
        """Each kind's processes that used the most CPU: what the largest shares of a kind (a
        Python that is a stream's driver, a CLI run, a job) actually were."""
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for c in self.known.values():
            if c and not (c["cmd"] and c["cmd"][0].startswith("[pytest-xdist")):
                by_kind.setdefault(_counted_kind(c), []).append(c)
        return {kind: [{"cpu_s": round(c["cpu"], 1), "test": c["test"] or c["file"], "cmd": " ".join(c["cmd"])[:300]}
                       for c in sorted(cs, key=lambda c: -c["cpu"])[:top]]
                for kind, cs in by_kind.items()}

    def _python_by_program(self) -> dict[str, dict[str, float]]:
        """The "other python" processes summed by the program they ran (a script, a module,
        `-c`): many short ones add up where no single one shows among the costliest."""
        sums: dict[str, dict[str, float]] = {}
        for c in self.known.values():
            if c and c["kind"] == OTHER_PYTHON:
                args = c["cmd"][1:]
                program = (f"-m {args[1]}" if args[:1] == ["-m"] and len(args) > 1
                           else os.path.basename(args[0]) if args else os.path.basename(c["cmd"][0]))
                entry = sums.setdefault(program, {"processes": 0, "cpu_s": 0.0})
                entry["processes"] += 1
                entry["cpu_s"] = round(entry["cpu_s"] + c["cpu"], 1)
        return dict(sorted(sums.items(), key=lambda kv: -kv[1]["cpu_s"]))

    def _drivers(self) -> list[dict[str, Any]]:
        """The Spark drivers the run started. A process a driver's JVM forks (Hadoop's
        `readlink` and `chmod`, RocksDB's `rm -rf`: thousands a minute) carries the JVM's
        command line until it execs, and one seen only then looks like a driver; a driver
        spends seconds of CPU starting, such a fork none."""
        return [c for c in self.known.values() if c and _counted_kind(c) == "spark driver"]


def _counted_kind(charge: dict[str, Any]) -> str:
    """The kind a process is counted as: a fork of a driver's JVM is not a driver."""
    if charge["kind"] == "spark driver" and charge["cpu"] < DRIVER_MIN_CPU_S:
        return "fork of a JVM, seen before its exec"
    return str(charge["kind"])


def measure(argv: list[str]) -> tuple[int, dict[str, Any]]:
    """Run `argv` with the marker in its environment; (its exit code, the report)."""
    tag = uuid.uuid4().hex
    sampler = Sampler(tag)
    proc = subprocess.Popen(argv, env={**os.environ, TAG_VARIABLE: tag})
    while True:
        try:
            sampler.sample()
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(INTERVAL_S)
        except KeyboardInterrupt:  # the command has it too (the terminal's process group): let it end
            continue
    report = sampler.report()
    with open("/proc/loadavg") as f:
        report["load_average"] = " ".join(f.read().split()[:3])
    return os.waitstatus_to_exitcode(status), report


def print_report(r: dict[str, Any], top: int) -> None:
    charged, busy = r["charged_cpu_s"], r["machine_busy_cpu_s"]
    share = f"{100 * charged / busy:.0f}% of the machine's {busy:,.0f} busy CPU-s" if busy else "the machine idle"
    print(f"measure: {r['wall_s']:,.0f} s wall, {charged:,.0f} CPU-s in the command's processes ({share}), "
          f"load average {r.get('load_average', '?')}")
    print("  by kind of process:")
    processes = r.get("processes_by_kind", {})
    for kind, cpu in r["by_kind"].items():
        n = processes.get(kind, 0)
        print(f"    {cpu:8.1f} s  {kind} ({n:,} process{'' if n == 1 else 'es'})")
    print(f"  by test file (the {top} costliest):")
    for name, cpu in list(r["by_file"].items())[:top]:
        print(f"    {cpu:8.1f} s  {name}")
    drivers = r.get("spark_drivers_by_file", {})
    if drivers:
        print(f"  Spark drivers started ({sum(drivers.values()):,}; the {top} files that started most):")
        for name, n in list(drivers.items())[:top]:
            print(f"    {n:8d}    {name}")
    print(f"  the machine's {r['cpus']} CPUs were busy {100 * r['machine_busy_share']:.0f}% of the time "
          "(under 100%, more pytest workers could end a run sooner)")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top", type=int, default=25, help="test files to list (default 25)")
    p.add_argument("--json", type=Path, help="also write the report there")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to measure after --")
    code, report = measure(command)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print_report(report, args.top)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
