"""This package's own code as one zip for spark-submit's `--py-files`: a state job, a
repartition or an edit check imports the code of the package that submitted it, so the
cluster's Python needs pyspark and the jobs' third-party modules, not this package.

The zip holds the parts the applications import (the package's `__init__`, `engine/`,
`backends/`, `jobs/`: pure Python, `.py` files read by Python's zip importer) and a
`.dist-info` with the package's version and its own `streamstate.backends` entry points,
so that stores and checkpoint filesystems are found by URL scheme from the zip as from an
installed distribution (importlib.metadata reads distributions in zips on `sys.path`).
It is built once per content: named by the sha256 of what it holds, in
`<streamstate home>/py-files/`, written to a temporary file and renamed, so that
concurrent submits share one and none ever sees half of one.

Spark puts py-files before the interpreter's site-packages: in the PYTHONPATH of a driver
(spark-submit's PythonRunner, YARN's application master) and at `sys.path[1]` in each Python
worker of the executors. So the shipped code wins over a copy installed on the cluster, and
its `.dist-info` over the installed one's (importlib.metadata keeps the first distribution
of a name on `sys.path`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from airflow_provider_streamstate.engine.checkpoint.filesystems import streamstate_home
from airflow_provider_streamstate.engine.streams.command import (
    conf_value,
    master_of,
    option_value,
    without_option,
)

PACKAGE = "airflow_provider_streamstate"
DISTRIBUTION = "airflow_provider_streamstate"  # the .dist-info's name (the normalized project name)
SHIPPED_PARTS = ("engine", "backends", "jobs")  # what the applications import besides the package's __init__
BACKENDS_GROUP = "streamstate.backends"
KEEP_UNUSED_S = 7 * 86400  # a zip no submit used for this long is deleted
PY_FILES_CONF = "spark.submit.pyFiles"


def package_root() -> Path:
    """The directory of this package as installed (or checked out) here."""
    return Path(__file__).resolve().parents[2]


def shipped_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """The (name in the zip, file) of every module the applications may import, sorted."""
    root = root or package_root()
    found = [root / "__init__.py"]
    for part in SHIPPED_PARTS:
        found += [p for p in (root / part).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted((f"{PACKAGE}/{p.relative_to(root).as_posix()}", p) for p in found)


def _dist_info() -> dict[str, str]:
    """The .dist-info files: the version, and the package's own backends' entry points (a
    backend of another distribution is that distribution's, installed on the cluster)."""
    from importlib.metadata import entry_points

    from airflow_provider_streamstate import __version__

    own = sorted({(ep.name, ep.value) for ep in entry_points(group=BACKENDS_GROUP)
                  if ep.value.startswith(f"{PACKAGE}.")})
    folder = f"{DISTRIBUTION}-{__version__}.dist-info"
    return {
        f"{folder}/METADATA": f"Metadata-Version: 2.1\nName: airflow-provider-streamstate\nVersion: {__version__}\n",
        f"{folder}/entry_points.txt": f"[{BACKENDS_GROUP}]\n" + "".join(f"{n} = {v}\n" for n, v in own),
    }


def package_zip(folder: Path | None = None) -> Path:
    """The zip of this package's shipped code, built now unless one of the same content is
    there (its modification time then renewed); zips unused for a week are deleted."""
    folder = folder or streamstate_home() / "py-files"
    files = shipped_files()
    contents = [(name, path.read_bytes()) for name, path in files]
    contents += [(name, text.encode()) for name, text in _dist_info().items()]
    digest = hashlib.sha256()
    for name, data in contents:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    target = folder / f"streamstate-code-{digest.hexdigest()[:16]}.zip"
    folder.mkdir(parents=True, exist_ok=True)
    if target.exists():
        os.utime(target)
    else:
        staging = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with zipfile.ZipFile(staging, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for name, data in contents:
                out.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data,
                             compress_type=zipfile.ZIP_DEFLATED)
        os.replace(staging, target)
    _prune(folder, keep=target)
    return target


def _prune(folder: Path, *, keep: Path) -> None:
    cutoff = time.time() - KEEP_UNUSED_S
    for old in folder.glob("streamstate-code-*.zip"):
        try:
            if old != keep and old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass  # another submit renewed or deleted it


def ships_code(command: Sequence[str], ship_code: bool | None) -> bool:
    """Whether a submit of `command` ships this package's code: as asked, else (None) where
    the application runs on a cluster, i.e. any master but `local` (whose driver and
    executors run this very Python: engine/streams/submission.py)."""
    if ship_code is not None:
        return ship_code
    master = master_of(command)
    return bool(master) and not (master == "local" or master.startswith("local["))


K8S_UPLOAD_CONF = "spark.kubernetes.file.upload.path"


def ships_driver_code(command: Sequence[str], ship_code: bool | None) -> bool:
    """Whether a stream's submit ships this package's code: as asked, else (None) where its
    driver runs on the cluster and the cluster copies the zip next to it at the submit (YARN;
    Kubernetes only with an upload path, without which spark-submit refuses a local
    py-file). A driver here runs for days on this host's Python, which has the package; a zip
    it imported from here may be pruned meanwhile (KEEP_UNUSED_S)."""
    from airflow_provider_streamstate.engine.streams.managers import manager_for

    if ship_code is not None:
        return ship_code
    manager = manager_for(command)
    if not manager.driver_on_cluster(command):
        return False
    return manager.name != "kubernetes" or conf_value(command, K8S_UPLOAD_CONF) is not None


def with_package_code(command: Sequence[str], ship_code: bool | None = None) -> list[str]:
    """`command` with this package's zip first in its py-files (`--py-files`, whose value
    wins over a `spark.submit.pyFiles` conf in spark-submit, so both are merged into it)
    when `ships_code` says so; else `command` as it is."""
    cmd = list(command)
    if not ships_code(cmd, ship_code):
        return cmd
    given = option_value(cmd, "--py-files") or conf_value(cmd, PY_FILES_CONF) or ""
    kept = without_option(cmd, "--py-files")
    py_files = ",".join([str(package_zip()), *(f for f in given.split(",") if f)])
    return [kept[0], "--py-files", py_files, *kept[1:]]
