"""A plain install of the built wheel with its `[spark]` extra (no lock, no dev overrides) gives
users a working, full PySpark.

The wheel is built from this tree and installed with its declared dependency ranges only into
a fresh virtual environment, the way a user installs it (`pip install
'airflow-provider-streamstate[spark]'`). There, `pyspark` must be the full
distribution (JVM jars included) at a version inside pyproject's range, no other distribution
(such as `pyspark-client`, which the apache-spark provider 6.x requires) may own files in the
`pyspark/` directory, every pyspark file must be the one pyspark shipped, the provider must
import without heavy libraries, and a local Spark session must run a query.

Needs the package index (PyPI) unless the uv cache already holds every distribution, hence
the `integration` mark. On two busy cores it took about 65 s with a warm uv cache and 95 s
with an empty one (most of it the install and the Spark session).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("pyspark", "great_expectations", "boto3", "pandas")


def _uv() -> str:
    exe = Path(sys.executable).parent / "uv"
    found = str(exe) if exe.exists() else shutil.which("uv")
    assert found, "uv is needed to build and install the wheel (make setup installs it into .venv)"
    return found


def _clean_env() -> dict[str, str]:
    """The caller's environment minus whatever would make the install not a plain one."""
    env = dict(os.environ)
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_CONSTRAINT", "UV_OVERRIDE", "PIP_CONSTRAINT"):
        env.pop(name, None)
    return env


def _declared(name: str) -> Requirement:
    """`name`'s range in the core dependencies or the `[spark]` extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = [*project["dependencies"], *project["optional-dependencies"]["spark"]]
    return next(r for r in map(Requirement, deps) if r.name == name)


class Venv:
    def __init__(self, root: Path, wheel: Path) -> None:
        self.root, self.wheel = root, wheel
        self.python = root / "bin" / "python"

    def run(self, code: str, timeout: float = 180) -> dict:
        """Run `code` isolated (-I: no cwd, no user site) in the venv; it prints one JSON object."""
        env = _clean_env() | {"AIRFLOW_HOME": str(self.root / "airflow-home"), "SPARK_LOCAL_IP": "127.0.0.1"}
        out = subprocess.run(
            [str(self.python), "-I", "-c", code],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """Build the wheel from a copy of the sources and install it without the lock."""
    uv, env = _uv(), _clean_env()
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "airflow_provider_streamstate",
        src / "airflow_provider_streamstate",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--quiet", "--wheel", "-o", str(dist), str(src)], env=env, check=True, timeout=300
    )
    (wheel,) = dist.glob("airflow_provider_streamstate-*.whl")

    root = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [uv, "venv", "--quiet", "--python", sys.executable, str(root)], env=env, check=True, timeout=120
    )
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(root / "bin" / "python"),
         f"airflow-provider-streamstate[spark] @ {wheel.as_uri()}"],
        env=env,
        check=True,
        timeout=540,
    )
    yield Venv(root, wheel)
    shutil.rmtree(root, ignore_errors=True)  # about 1.2 GB; pytest would keep three runs of it


def test_a_plain_install_gets_the_full_pyspark_in_the_declared_range_and_no_pyspark_client(
    plain_install: Venv,
) -> None:
    facts = plain_install.run(
        "import json, importlib.metadata as md\n"
        "def v(name):\n"
        "    try: return md.version(name)\n"
        "    except md.PackageNotFoundError: return None\n"
        "print(json.dumps({n: v(n) for n in ('pyspark', 'pyspark-client', 'pyspark-connect', 'boto3')}))"
    )
    assert facts["pyspark-client"] is None and facts["pyspark-connect"] is None, facts
    assert facts["pyspark"] is not None and _declared("pyspark").specifier.contains(facts["pyspark"]), facts
    assert _declared("boto3").specifier.contains(facts["boto3"]), facts


def test_only_the_pyspark_distribution_owns_files_in_the_pyspark_directory_and_none_was_overwritten(
    plain_install: Venv,
) -> None:
    facts = plain_install.run(
        "import base64, hashlib, json, importlib.metadata as md\n"
        "owners = sorted({d.metadata['Name'] for d in md.distributions()\n"
        "                 for f in (d.files or []) if f.parts and f.parts[0] == 'pyspark'})\n"
        "changed, missing = [], []\n"
        "for f in md.distribution('pyspark').files:\n"
        "    if f.hash is None: continue\n"
        "    p = f.locate()\n"
        "    if not p.exists(): missing.append(str(f)); continue\n"
        "    h = hashlib.new(f.hash.mode)\n"
        "    with open(p, 'rb') as fh:\n"
        "        while chunk := fh.read(1 << 20): h.update(chunk)\n"
        "    if base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode() != f.hash.value: changed.append(str(f))\n"
        "print(json.dumps({'owners': owners, 'changed': changed[:20], 'missing': missing[:20]}))"
    )
    assert facts["owners"] == ["pyspark"], facts
    assert facts["changed"] == [] and facts["missing"] == [], facts


def test_the_installed_pyspark_is_the_full_distribution_with_its_jvm_jars(plain_install: Venv) -> None:
    facts = plain_install.run(
        "import json, importlib.metadata as md, pyspark, pyspark.sql.streaming\n"
        "from pathlib import Path\n"
        "jars = sorted(p.name for p in (Path(pyspark.__file__).parent / 'jars').glob('*.jar'))\n"
        "print(json.dumps({'version': pyspark.__version__, 'dist': md.version('pyspark'),\n"
        "                  'file': pyspark.__file__, 'jars': jars}))"
    )
    assert facts["version"] == facts["dist"], facts
    assert Path(facts["file"]).is_relative_to(plain_install.root), facts
    for prefix in ("spark-core_", "spark-sql_", "spark-catalyst_"):
        assert any(j.startswith(prefix) and facts["version"] in j for j in facts["jars"]), (
            prefix,
            facts["jars"][:10],
        )


def test_the_provider_imports_from_the_wheel_and_registers_without_pulling_heavy_libraries(
    plain_install: Venv,
) -> None:
    facts = plain_install.run(
        "import json, sys, importlib.metadata as md\n"
        "import airflow_provider_streamstate as p\n"
        "from airflow_provider_streamstate.get_provider_info import get_provider_info\n"
        "eps = [e.value for e in md.entry_points(group='apache_airflow_provider')\n"
        "       if e.value.startswith('airflow_provider_streamstate')]\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'file': p.__file__, 'version': p.__version__, 'info': get_provider_info(),\n"
        "                  'eps': eps, 'heavy': heavy}))"
    )
    assert Path(facts["file"]).is_relative_to(plain_install.root), facts["file"]
    assert plain_install.wheel.name.startswith(f"airflow_provider_streamstate-{facts['version']}-")
    assert facts["info"]["package-name"] == "airflow-provider-streamstate"
    assert facts["info"]["versions"] == [facts["version"]]
    assert facts["eps"] == ["airflow_provider_streamstate.get_provider_info:get_provider_info"]
    assert facts["heavy"] == [], facts["heavy"]


def test_a_local_spark_session_starts_and_runs_a_query(plain_install: Venv) -> None:
    facts = plain_install.run(
        "import json\n"
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[1]').appName('packaging')\n"
        "         .config('spark.ui.enabled', 'false').config('spark.ui.showConsoleProgress', 'false')\n"
        "         .config('spark.driver.host', '127.0.0.1').config('spark.sql.shuffle.partitions', '1')\n"
        "         .getOrCreate())\n"
        "try:\n"
        "    out = {'count': spark.range(10).where('id % 2 = 0').count(), 'version': spark.version}\n"
        "finally:\n"
        "    spark.stop()\n"
        "print(json.dumps(out))",
        timeout=300,
    )
    assert facts["count"] == 5
    assert _declared("pyspark").specifier.contains(facts["version"]), facts
