"""One spark-submit, started detached: what a stream's launch and a state job share.

A `Submission` takes the command the caller built (utils/spark_submit.py's, the CLI's), lets the
cluster manager of its master complete it (engine/streams/managers/), moves its secret
confs into a properties file only this user can read (engine/streams/secret_confs.py),
writes a header with the command, its secrets as `***`, to the log, and starts spark-submit
in its own session and process group with its output in that log: the caller may go away,
and signals meant for the caller's group do not reach it. The properties file is deleted
as soon as Spark has read it: by the driver itself when it starts here (it is named in
STREAMSTATE_SECRETS_FILE), by `forget_secrets` once spark-submit returned otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_streamstate.engine.core.config.redact import redact_command, sensitive_values
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams import processes
from airflow_provider_streamstate.engine.streams.command import master_of
from airflow_provider_streamstate.engine.streams.managers import ClusterApp, ClusterManager, manager_for
from airflow_provider_streamstate.engine.streams.secret_confs import ENV_SECRETS_FILE, move_secrets_to_file


def resolve_spark_submit(command: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """`command` and `env` with the spark-submit that runs it, found in this order (the first
    that exists wins; docs/deployment.md):

    1. a path in `command[0]` (a `spark` connection's spark-binary given as a path): as is;
    2. `$SPARK_HOME/bin/<binary>` when SPARK_HOME is set (in `env`, else this process's
       environment): a platform's Spark; spark-submit runs SPARK_HOME's classes wherever the
       script came from, so its own script comes first;
    3. `<binary>` on the PATH;
    4. the spark-submit pyspark ships (the `[spark]` extra), with pyspark as SPARK_HOME.

    `<binary>` is `command[0]`: `spark-submit`, or the connection's spark-binary. None found:
    UsageError naming the ways to give one."""
    cmd, out = list(command), dict(env)
    if not cmd or os.sep in cmd[0]:
        return cmd, out
    binary, inherited = cmd[0], {**os.environ, **out}
    spark_home = inherited.get("SPARK_HOME")
    if spark_home:
        candidate = Path(spark_home) / "bin" / binary
        if not candidate.is_file():
            raise UsageError(f"SPARK_HOME={spark_home} has no bin/{binary}",
                             hint="point SPARK_HOME at a Spark installation, or unset it to use "
                             f"the {binary} on the PATH")
        cmd[0] = str(candidate)
        return cmd, out
    if shutil.which(binary, path=inherited.get("PATH")):
        return cmd, out
    found = importlib.util.find_spec("pyspark")
    for home in list(found.submodule_search_locations or []) if found else []:
        candidate = Path(home) / "bin" / binary
        if candidate.is_file():
            cmd[0] = str(candidate)
            out["SPARK_HOME"] = home
            return cmd, out
    raise UsageError(f"no {binary} here: SPARK_HOME is not set, {binary} is not on the PATH and no pyspark "
                     "with its own is installed", hint=SPARK_SUBMIT_HINT)


def spark_version_of(command: Sequence[str], env: Mapping[str, str]) -> tuple[str, str] | None:
    """The version of the Spark a resolved spark-submit `command` (run with `env`) runs, and
    the installation that says so: its `spark-core` jar. Apache's script runs SPARK_HOME's
    classes when it is set; else its own installation's. None when that cannot be told (a
    wrapper given as a path outside SPARK_HOME may set its own; a vendor's layout): Spark
    answers then."""
    home = env.get("SPARK_HOME") or ""
    binary = command[0] if command else ""
    if os.sep in binary:
        own = Path(binary).resolve().parent.parent
        if home and own != Path(home).resolve():
            return None
        home = str(own)
    elif not home:
        found = shutil.which(binary, path=env.get("PATH")) if binary else None
        home = str(Path(found).resolve().parent.parent) if found else ""
    for jar in sorted(Path(home).glob("jars/spark-core_*.jar")) if home else []:
        match = re.fullmatch(r"spark-core_\d+\.\d+-(\d+\.\d+\.\d+\S*)\.jar", jar.name)
        if match:
            return match.group(1), home
    return None


# Where spark-submit comes from, in the order resolve_spark_submit looks.
SPARK_SUBMIT_HINT = ("set SPARK_HOME to the platform's Spark, put spark-submit on the PATH, or set the "
                     "spark connection's spark-binary to its path (for a local Spark: pip install "
                     "'airflow-provider-streamstate[spark]')")


def package_python_env(command: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """`env` plus the Python that runs this package's wrapper or job: a driver that runs here
    uses this process's Python unless told (never a driver on the cluster: the manager would
    hand the variable to a container on another host, whose Python the confs say), and a
    local master's executors too."""
    out = dict(env)
    inherited = {**os.environ, **out}
    if "PYSPARK_DRIVER_PYTHON" not in inherited and not manager_for(command).driver_on_cluster(command):
        out["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if master_of(command).startswith("local") and "PYSPARK_PYTHON" not in inherited:
        out["PYSPARK_PYTHON"] = sys.executable
    return out


@dataclass
class Submission:
    """A spark-submit command ready to start: see the module docstring. Build it with
    `Submission.prepare`; `start` runs it."""

    manager: ClusterManager
    argv: list[str]  # secrets moved out
    env: dict[str, str]
    log_path: Path
    secrets_file: Path
    app: ClusterApp | None  # where a driver on the cluster will be found; None: the driver runs here
    shown: list[str]  # argv with its secrets as ***: what records and logs may hold
    moved: list[str] = field(default_factory=list)  # the names of the confs in the secrets file

    @classmethod
    def prepare(cls, command: Sequence[str], *, env: Mapping[str, str], log_path: Path, name: str,
                launch_id: str, settings: Mapping[str, str] | None = None,
                secret_env: Mapping[str, str] | None = None) -> Submission:
        """`command` completed by its cluster manager (refused in one line when the manager
        cannot run it), its secrets in `<log>.properties`. `settings` reach the driver's
        environment wherever it runs; `env` is spark-submit's whole environment; the values
        of `secret_env` (and of the command's sensitive options) never show."""
        if not command:
            raise UsageError("nothing to submit: the command is empty", hint="give the spark-submit command line")
        manager = manager_for(command)
        prepared = manager.prepare(command, name=name, launch_id=launch_id, settings=settings or {}, env=env)
        secrets_file = log_path.with_suffix(".properties")
        argv, moved = move_secrets_to_file(prepared.command, secrets_file, env=prepared.env)
        child_env = dict(prepared.env)
        if moved:
            child_env[ENV_SECRETS_FILE] = str(secrets_file)  # a driver here deletes it once it runs
        shown = redact_command(argv, secrets=sensitive_values(env=secret_env or {}, args=list(command)))
        return cls(manager, argv, child_env, log_path, secrets_file, prepared.app, shown, moved)

    def start(self, header: str, *, cwd: str | Path | None = None) -> subprocess.Popen[bytes]:
        """Write the header and start spark-submit detached, its output in the log; the
        process is adopted (engine/streams/processes.py). UsageError when it cannot run."""
        with open(self.log_path, "ab") as out:
            out.write(f"streamstate: {header}: {' '.join(self.shown)}\n".encode())
            if self.moved:
                out.write(f"streamstate: {len(self.moved)} secret conf(s) passed in a properties file: "
                          f"{', '.join(self.moved)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True, env=self.env, cwd=cwd)
            except OSError as exc:
                self.forget_secrets()
                raise UsageError(f"cannot run {self.argv[0]!r}: {exc.strerror or exc}",
                                 hint=SPARK_SUBMIT_HINT) from None
        processes.adopt(proc)
        return proc

    def forget_secrets(self) -> None:
        """Delete the properties file of secret confs: Spark has read it once spark-submit
        returned (a driver on the cluster) or the driver runs."""
        self.secrets_file.unlink(missing_ok=True)

    def identify(self) -> ClusterApp | None:
        """The application, completed from what spark-submit printed once it returned."""
        if self.app is None:
            return None
        try:
            output = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return self.app
        return self.manager.identify(self.app, output)
