"""DAG parse benchmark: what each file in dags/ costs the DAG processor, against an empty DAG.

    .venv/bin/python benchmarks/dag_parse_bench.py [--repeat N]

The DAG processor parses every file every few seconds, each time in a fresh process forked
from one that has already imported Airflow and the `airflow.*` modules the file names
(`[dag_processor] parsing_pre_import_modules`); our own modules are imported again on every
parse. Each measurement here is one fresh Python process that first pays what the processor
pays once (`import airflow.sdk`, the DagBag and serializer, the file's `airflow.*` imports),
then times what it pays per file: `DagBag(dag_folder=<file>)` (running the file, collecting
and checking its DAGs) and serialising each DAG. A file's own cost is its median minus the
median of an empty DAG file (one DAG, one EmptyOperator) measured in the same run, files
interleaved; in wall time, and in CPU time, which the machine's load disturbs less (on a
busy machine wall time also counts waiting for a core). Python's bytecode cache is on,
in a private PYCACHEPREFIX filled by one discarded warm-up round, as on a deployed
machine (this project's environment sets PYTHONDONTWRITEBYTECODE, which would make every
process compile every module it imports; `--no-bytecode-cache` measures that). Goal: < 0.3 s of own CPU time
each (on an idle machine wall time is about the same). Writes .bench/dag_parse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import REPO, WORK  # this folder is on sys.path; it puts the repo there too

GOAL_S = 0.3
EMPTY_DAG = '''"""The baseline: one DAG with one EmptyOperator."""
import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG(dag_id="empty", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), schedule=None, catchup=False):
    EmptyOperator(task_id="nothing")
'''

# Runs in the fresh process: argv[1] is the DAG file; prints one JSON line.
PROBE = r'''
import importlib, json, sys, time
import airflow.sdk  # paid once by the DAG processor
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
from airflow.utils.file import iter_airflow_imports

path = sys.argv[1]
for module in iter_airflow_imports(path):  # what parsing_pre_import_modules imports beforehand
    importlib.import_module(module)
before = set(sys.modules)
c0, t0 = time.process_time(), time.perf_counter()
bag = DagBag(dag_folder=path)
t1 = time.perf_counter()
for dag in bag.dags.values():
    DagSerialization.to_dict(dag)
c2, t2 = time.process_time(), time.perf_counter()
print(json.dumps({
    "parse_s": t1 - t0, "serialize_s": t2 - t1, "total_s": t2 - t0, "cpu_s": c2 - c0,
    "dags": sorted(bag.dag_ids), "import_errors": {str(k): str(v)[-300:] for k, v in bag.import_errors.items()},
    "new_modules": len(set(sys.modules) - before),
    "new_packages": sorted({m.split(".")[0] for m in set(sys.modules) - before if not m.startswith("unusual_prefix")}),
}))
'''


def measure(path: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"parsing {path} failed:\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if report["import_errors"]:
        raise RuntimeError(f"{path}: import errors {report['import_errors']}")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=7, help="fresh processes per file (median reported)")
    p.add_argument("--dags", type=Path, default=REPO / "dags", help="folder of DAG files to measure")
    p.add_argument("--no-bytecode-cache", action="store_true",
                   help="compile every imported module in every process (PYTHONDONTWRITEBYTECODE, no .pyc)")
    args = p.parse_args(argv)

    files = sorted(args.dags.glob("*.py"))
    with tempfile.TemporaryDirectory(prefix="dag-parse-bench-") as tmp:
        home = Path(tmp)
        empty = home / "empty_dag.py"
        empty.write_text(EMPTY_DAG)
        env = {
            **os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        }
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
            for f in [empty, *files]:  # warm-up: writes the bytecode every later process reads
                measure(f, env)
        runs: dict[str, list[dict[str, Any]]] = {str(f): [] for f in [empty, *files]}
        started = time.perf_counter()
        for i in range(args.repeat):  # interleaved, so drift in the machine's load hits every file alike
            for f in [empty, *files]:
                runs[str(f)].append(measure(f, env))
            print(f"  round {i + 1}/{args.repeat} done ({time.perf_counter() - started:.0f}s)", flush=True)

    def med(path: Path, key: str) -> float:
        return statistics.median(r[key] for r in runs[str(path)])

    base = med(empty, "total_s")
    base_cpu = med(empty, "cpu_s")
    rows = []
    for f in files:
        total = med(f, "total_s")
        rows.append({
            "file": f.name, "dags": runs[str(f)][0]["dags"], "median_s": total,
            "parse_s": med(f, "parse_s"), "serialize_s": med(f, "serialize_s"),
            "min_s": min(r["total_s"] for r in runs[str(f)]), "max_s": max(r["total_s"] for r in runs[str(f)]),
            "own_s": total - base, "ratio_to_empty": total / base,
            "cpu_s": med(f, "cpu_s"), "own_cpu_s": med(f, "cpu_s") - base_cpu,
            "meets_goal": med(f, "cpu_s") - base_cpu < GOAL_S,
            "new_modules": runs[str(f)][0]["new_modules"], "new_packages": runs[str(f)][0]["new_packages"],
        })
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "python": platform.python_version(),
        "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "repeat": args.repeat, "goal_own_s": GOAL_S,
        "bytecode_cache": not args.no_bytecode_cache,
        "empty": {"median_s": base, "parse_s": med(empty, "parse_s"), "serialize_s": med(empty, "serialize_s"),
                  "cpu_s": base_cpu,
                  "min_s": min(r["total_s"] for r in runs[str(empty)]),
                  "max_s": max(r["total_s"] for r in runs[str(empty)])},
        "files": rows,
    }
    WORK.mkdir(exist_ok=True)
    (WORK / "dag_parse.json").write_text(json.dumps(result, indent=2))

    print(f"\nDAG parse per file, median of {args.repeat} fresh processes (after `import airflow.sdk`), "
          f"bytecode cache {'off' if args.no_bytecode_cache else 'on'}:\n")
    print("| file | parse + serialize s | of which serialize s | empty DAG s | own cost s | ratio to empty "
          "| CPU s | empty CPU s | own CPU s | modules it imports | goal: own CPU < 0.3 s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| `{r['file']}` | {r['median_s']:.3f} | {r['serialize_s']:.3f} | {base:.3f} | {r['own_s']:.3f} "
              f"| {r['ratio_to_empty']:.1f} | {r['cpu_s']:.3f} | {base_cpu:.3f} | {r['own_cpu_s']:.3f} "
              f"| {r['new_modules']} | {'met' if r['meets_goal'] else 'MISSED'} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          f"empty DAG: median {base:.3f}s (min {result['empty']['min_s']:.3f}, max {result['empty']['max_s']:.3f}); "
          f"raw figures in {(WORK / 'dag_parse.json').relative_to(REPO)}")
    return 0  # measured, not asserted: the table says whether each file meets the goal


if __name__ == "__main__":
    sys.exit(main())
