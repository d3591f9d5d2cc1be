"""Install footprint benchmark: what installing this package adds to a plain Airflow
environment, at a base revision and in this tree, and the wall time of `streamstate --help`.

    .venv/bin/python benchmarks/install_footprint_bench.py [--base REV] [--repeat N]

Three fresh virtualenvs of this Python, each made with `uv pip install apache-airflow==3.3.2`
(uv's shared cache: nothing is downloaded that setup or an earlier run fetched): the plain
one, one with the package at REV (default `main`: its `git archive`) installed on top, one
with this tree's package installed on top, without extras, as `pip install
airflow-provider-streamstate` would (wheels built from the sources, the resolver free to pick
within the declared ranges, versions Airflow already has kept). Measured: the bytes of
site-packages (`du`, apparent sizes) and how many distributions each install adds. Then
`streamstate --help` in each environment with the package, `--repeat` times, files
interleaved, against `python -c pass` in the same environment: the median wall time, and
the median minus the interpreter's start. The bytecode cache is on (uv compiles it), as on a
deployed machine. Goals: the addition under 25% of REV's; `--help` under 0.3 s.
Writes .bench/install_footprint_results.json. The environments are removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import REPO, write_results  # this folder is on sys.path; it puts the repo there too

AIRFLOW = "apache-airflow==3.3.2"
MiB = 1 << 20


def uv() -> str:
    found = Path(sys.executable).parent / "uv"
    return str(found) if found.exists() else "uv"


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    return env


def venv(root: Path, *requirements: str) -> Path:
    subprocess.run([uv(), "venv", "-q", "--python", sys.executable, str(root)], check=True, env=clean_env())
    python = root / "bin" / "python"
    subprocess.run([uv(), "pip", "install", "-q", "--compile-bytecode", "--python", str(python), AIRFLOW],
                   check=True, env=clean_env())
    if requirements:
        subprocess.run([uv(), "pip", "install", "-q", "--compile-bytecode", "--python", str(python), *requirements],
                       check=True, env=clean_env())
    return python


def site_packages(python: Path) -> tuple[int, int]:
    """(bytes, distributions) of the environment's site-packages."""
    root = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    size = int(subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True, check=True).stdout.split()[0])
    return size, len(list(root.glob("*.dist-info")))


def sources(rev: str | None, target: Path) -> Path:
    """The package's sources at `rev` (None: this tree) in `target`."""
    target.mkdir(parents=True)
    if rev is None:
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, target / name)
        shutil.copytree(REPO / "airflow_provider_streamstate", target / "airflow_provider_streamstate",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "pyproject.toml", "README.md",
                                  "airflow_provider_streamstate"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=clean_env())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="the revision to compare with (default main)")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    base_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.base], capture_output=True,
                              text=True, check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="streamstate-footprint-"))
    try:
        plain = venv(work / "plain")
        envs = {f"base {base_rev}": venv(work / "base", str(sources(args.base, work / "src-base"))),
                "this tree": venv(work / "tree", str(sources(None, work / "src-tree")))}
        plain_bytes, plain_dists = site_packages(plain)
        results: dict[str, object] = {"plain Airflow 3.3.2 site-packages (MiB)": round(plain_bytes / MiB, 1),
                                      "plain Airflow 3.3.2 distributions": plain_dists}
        added: dict[str, int] = {}
        for name, python in envs.items():
            size, dists = site_packages(python)
            added[name] = size - plain_bytes
            results[f"{name}: added (MiB)"] = round(added[name] / MiB, 1)
            results[f"{name}: distributions added"] = dists - plain_dists
        base_added, tree_added = added[f"base {base_rev}"], added["this tree"]
        results["this tree's addition / base's"] = f"{100 * tree_added / base_added:.1f}% (goal < 25%)"

        timings: dict[str, list[float]] = {name: [] for name in envs}
        starts: dict[str, list[float]] = {name: [] for name in envs}
        for python in envs.values():  # one discarded round: the page cache warm
            wall([str(python.parent / "streamstate"), "--help"])
        for _ in range(args.repeat):
            for name, python in envs.items():
                timings[name].append(wall([str(python.parent / "streamstate"), "--help"]))
                starts[name].append(wall([str(python), "-c", "pass"]))
        for name in envs:
            median, start = statistics.median(timings[name]), statistics.median(starts[name])
            results[f"{name}: streamstate --help median (s)"] = f"{median:.3f} (goal < 0.3)"
            results[f"{name}: --help minus `python -c pass` (s)"] = f"{median - start:.3f}"
        results["repeat"] = args.repeat
        results["date"] = time.strftime("%Y-%m-%d")
        results["load average at the end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
        write_results("install_footprint", results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
