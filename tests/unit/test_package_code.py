"""The zip of this package's code that state jobs, the repartition and the edit check take to
the cluster in their py-files: it holds every module the applications import (and nothing
they import is left out), it is built once per content, a Python without this package
imports the applications and finds the package's backends from it alone, and it is added to
a submit on a cluster (merged with the submit's own py-files) and not to a local one,
unless asked otherwise."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.streams.command import conf_value, option_value
from airflow_provider_streamstate.engine.streams.package_code import (
    PACKAGE,
    package_root,
    package_zip,
    shipped_files,
    with_package_code,
)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))


def _module_of(name: str) -> str:
    return name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_every_module_a_shipped_module_imports_from_this_package_is_shipped_too() -> None:
    """The applications (jobs/) import the engine and the backends, and those import only
    each other: no import, at module level or inside a function, reaches a module left out."""
    shipped = {_module_of(name) for name, _ in shipped_files()}
    assert f"{PACKAGE}.jobs.state_job" in shipped and f"{PACKAGE}.jobs.rescale_job" in shipped
    missing = set()
    for name, path in shipped_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for target in targets:
                if target.startswith(PACKAGE + ".") and not any(
                        target == m or target.startswith(m + ".") or m.startswith(target + ".") for m in shipped):
                    missing.add((name, target))
    assert missing == set()


def test_the_zip_is_built_once_per_content_and_holds_the_modules_and_the_backends_entry_points() -> None:
    first = package_zip()
    inode = first.stat().st_ino
    again = package_zip()
    assert again == first and again.stat().st_ino == inode  # reused, not rewritten
    with zipfile.ZipFile(first) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert {name for name, _ in shipped_files()} <= names
    assert f"{PACKAGE}/operators/state.py" not in names  # the Airflow layer stays home
    assert "[streamstate.backends]" in entry_points and f"s3 = {PACKAGE}.backends.s3:BACKEND" in entry_points
    assert "flat" not in entry_points  # another distribution's backend is that distribution's
    assert not list(first.parent.glob(".*.tmp"))


def test_a_python_without_this_package_imports_the_applications_and_finds_the_backends_from_the_zip(
    tmp_path: Path,
) -> None:
    """`python -S` (no site-packages: neither this package nor anything installed) with the
    zip alone on its path, as Spark gives a driver its py-files."""
    code = ("import sys, airflow_provider_streamstate.jobs.state_job as job\n"
            "from airflow_provider_streamstate.engine.stores.backends import backend_for\n"
            "from airflow_provider_streamstate.engine.stores import open_store\n"
            "print(job.__file__)\n"
            f"print(backend_for('s3').name, type(open_store({(tmp_path / 'store').as_uri()!r})).__name__)\n")
    env = {**os.environ, "PYTHONPATH": str(package_zip())}
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[0].startswith(str(package_zip())) and out[1:] == ["s3", "LocalStore"]


SUBMIT = ["spark-submit", "--master", "yarn", "--deploy-mode", "cluster", "--conf", "spark.x=1", "job.py", "a"]


def test_a_submit_to_a_cluster_gets_the_zip_first_in_its_py_files_and_a_local_one_does_not() -> None:
    shipped = with_package_code(SUBMIT)
    assert shipped == [SUBMIT[0], "--py-files", str(package_zip()), *SUBMIT[1:]]
    standalone = ["spark-submit", "--master", "spark://h:7077", "job.py"]
    assert option_value(with_package_code(standalone), "--py-files") == str(package_zip())
    for local in ("local", "local[2]", "local[*]"):
        command = ["spark-submit", "--master", local, "job.py"]
        assert with_package_code(command) == command
        assert option_value(with_package_code(command, ship_code=True), "--py-files") == str(package_zip())
    assert with_package_code(SUBMIT, ship_code=False) == SUBMIT


@pytest.mark.parametrize("given", [
    ["--py-files", "deps.zip,util.py"],
    ["--py-files=deps.zip,util.py"],
    ["--conf", "spark.submit.pyFiles=deps.zip,util.py"],
])
def test_the_submits_own_py_files_are_kept_after_the_zip(given: list[str]) -> None:
    """spark-submit's `--py-files` wins over `spark.submit.pyFiles`: both end up in the one
    `--py-files` the command keeps."""
    command = with_package_code(["spark-submit", "--master", "yarn", *given, "job.py"])
    assert option_value(command, "--py-files") == f"{package_zip()},deps.zip,util.py"
    assert command.count("--py-files") == 1 and not [a for a in command if a.startswith("--py-files=")]
    assert command[-1] == "job.py" and conf_value(command, "spark.submit.pyFiles") in (None, "deps.zip,util.py")


def test_the_package_root_is_the_package_this_test_imports() -> None:
    import airflow_provider_streamstate

    assert package_root() == Path(airflow_provider_streamstate.__file__).resolve().parent


def test_a_state_jobs_submit_ships_the_code_on_a_cluster_unless_its_options_say_not_to(tmp_path: Path) -> None:
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.state.jobs import StateJobRequest
    from airflow_provider_streamstate.engine.state.submit import complete_command
    from airflow_provider_streamstate.spec import SparkJobOptions

    store = LocalStore(tmp_path / "store")
    request = StateJobRequest(kind="show", store=store.url, stream="orders").with_job_id()
    standalone = ["spark-submit", "--master", "spark://h:7077", "app.py"]
    assert option_value(complete_command(standalone, request, store, {})[0], "--py-files") == str(package_zip())
    assert "--py-files" not in complete_command(standalone, request, store, {}, ship_code=False)[0]
    local = ["spark-submit", "--master", "local[2]", "app.py"]
    assert "--py-files" not in complete_command(local, request, store, {})[0]
    assert SparkJobOptions.of({"conn_id": "spark_yarn", "ship_code": False}).ship_code is False
    assert SparkJobOptions.of({"conn_id": "spark_yarn"}).ship_code is None


def test_the_clis_ship_code_option_applies_to_a_spark_application_only(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from airflow_provider_streamstate.cli import main

    assert main(["state", "show", "--store", (tmp_path / "store").as_uri(), "--stream", "orders", "latest",
                 "--no-ship-code"]) == 2
    assert "--ship-code apply to a Spark application" in capsys.readouterr().err
