"""A cluster's Python without this package, as a platform's image has it: a virtualenv of the
distributions an application needs and their dependencies, linked from a virtualenv of this
machine (no download), plus an old copy of this package that fails on import, which the
code a submit ships (engine/streams/package_code.py) must win over."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution, distributions
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# What the cluster's Python has: the jobs' third-party modules (docs/deployment.md).
CLUSTER_PYTHON_HAS = ("pyspark", "lz4", "xxhash", "great-expectations")
OLD_COPY = "raise ImportError('the copy of streamstate installed on the cluster was imported')\n"


def _closure(names: tuple[str, ...], site: Path | None = None) -> list[Any]:
    """The distributions of `names` installed here (or in the site-packages `site`) and of
    everything they require, extras and markers as pip reads them."""
    found: dict[str, Any] = {}
    todo = [(name, frozenset[str]()) for name in names]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), extras) in seen:
            continue
        seen.add((canonicalize_name(name), extras))
        try:
            dist = distribution(name) if site is None else next(iter(distributions(name=name, path=[str(site)])))
        except (PackageNotFoundError, StopIteration):
            continue  # an optional dependency this machine does not have
        found[canonicalize_name(name)] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
                todo.append((req.name, frozenset(req.extras)))
    return list(found.values())


def cluster_python(root: Path, has: tuple[str, ...] = CLUSTER_PYTHON_HAS, *, source: Path | None = None) -> Path:
    """A virtualenv with only the distributions `has` and their dependencies (linked from the
    main virtualenv's site-packages, or from another virtualenv `source`) and an old copy of
    this package that fails on import."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    from_site = next((source / "lib").glob("python3*/site-packages")) if source else None
    for dist in _closure(has, from_site):
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in sorted(t for t in tops if t not in ("..", "__pycache__") and not t.endswith(".pth")):
            linked = Path(str(dist.locate_file(top)))
            if linked.exists() and not (site / top).exists():
                (site / top).symlink_to(linked)
    (site / "airflow_provider_streamstate").mkdir()
    (site / "airflow_provider_streamstate" / "__init__.py").write_text(OLD_COPY)
    return root / "bin" / "python"
