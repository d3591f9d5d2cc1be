"""The CLI starts light: `streamstate --help` imports no engine module, and `state get` on a
local snapshot or checkpoint imports neither Airflow nor boto3 (nor pyspark, pandas): a
person at a terminal waits only for what the lookup needs. The export formats the help
shows are the engine's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.state_files import Aggregation

HEAVY = ("airflow", "boto3", "botocore", "pyspark", "pandas", "great_expectations")
REPORT = ("import sys, json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(" + repr(HEAVY)
          + ")) + sorted(m for m in sys.modules if m.startswith('airflow_provider_streamstate.engine'))))")


def _run(body: str) -> list[str]:
    code = f"{body}\n{REPORT}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_help_imports_no_engine_module_and_no_heavy_library() -> None:
    loaded = _run("from airflow_provider_streamstate.cli.main import build_parser\n"
                  "import contextlib, io\n"
                  "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
                  "    build_parser().parse_args(['--help'])")
    assert loaded == []


def test_state_get_on_a_local_snapshot_or_checkpoint_imports_neither_airflow_nor_boto3(tmp_path: Path) -> None:
    agg = Aggregation(tmp_path / "ckpt", partitions=3)
    agg.commit({"a": 1, "b": 2})
    store = LocalStore(tmp_path / "store", fsync=False)
    create_snapshot(str(agg.root), store, "s")
    for argv in (["state", "get", "--store", str(tmp_path / "store"), "--stream", "s", "latest", "--key", "a"],
                 ["state", "get", "--checkpoint", str(agg.root), "--key", "k=b"]):
        loaded = _run("from airflow_provider_streamstate.cli.main import main\n"
                      "import contextlib, io, json\n"
                      "out = io.StringIO()\n"
                      "with contextlib.redirect_stdout(out):\n"
                      f"    assert main({argv!r} + ['--json']) == 0\n"
                      "assert json.loads(out.getvalue())['found'], out.getvalue()")
        heavy = [m for m in loaded if not m.startswith("airflow_provider_streamstate")]
        assert heavy == [], argv
        assert "airflow_provider_streamstate.engine.lookup.api" in loaded


def test_the_export_formats_the_help_shows_are_the_engines() -> None:
    from airflow_provider_streamstate.cli.state import EXPORT_METAVAR
    from airflow_provider_streamstate.engine.state.jobs import EXPORT_FORMATS

    assert EXPORT_METAVAR == "{" + ",".join(EXPORT_FORMATS) + "}"
