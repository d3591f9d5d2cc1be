"""What every `streamstate` command shares: exit codes, the parser class, the options every
command takes (the store and its credentials, `--json`, `--parallelism`), opening the store,
printing a result as text or JSON, and the progress bar.

The engine is imported inside the functions that use it: `streamstate --help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

# What a command module's `register(commands)` returns: {(command, subcommand or None): handler}.
Handler = Callable[[argparse.Namespace], int]
Handlers = dict[tuple[str, str | None], Handler]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class TerminalProgress:
    """A one-line progress bar on stderr, redrawn at most 10 times a second."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.phase, self.total, self.done, self.files, self.last = "", 0, 0, 0, 0.0

    def start(self, phase: str, total_files: int, total_bytes: int) -> None:
        with self.lock:
            self.phase, self.total, self.done, self.files, self.last = phase, total_bytes, 0, total_files, 0.0

    def advance(self, nbytes: int) -> None:
        with self.lock:
            self.done += nbytes
            now = time.monotonic()
            if now - self.last >= 0.1:
                self.last = now
                self._draw()

    def _draw(self) -> None:
        if not self.total:
            return
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 30)
        self.stream.write(
            f"\r{self.phase:8} [{bar:<30}] {frac * 100:5.1f}%  {human_bytes(self.done)} / {human_bytes(self.total)} ({self.files} files)"
        )
        self.stream.flush()

    def finish(self) -> None:
        with self.lock:
            if self.total and self.last:
                self.done = self.total
                self._draw()
                self.stream.write("\n")
                self.stream.flush()


class UsageFailure(Exception):
    """Raised by the parser instead of exiting, so main() owns every exit path."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageFailure(f"{self.prog}: {message}")


class RenamedOption(argparse.Action):
    """An option's old name (hidden from --help): still taken, with a note on stderr."""

    def __init__(self, *args: Any, new: str, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "help": argparse.SUPPRESS})
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"streamstate: {option_string} is renamed {self.new}; it will be removed", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_storage_conn_option(p: argparse.ArgumentParser, new: str, *, help: str) -> None:
    """The option naming a storage connection (`--storage-conn-id`, `--from-storage-conn-id`...),
    and its old name (`--aws-conn-id`...) for scripts written before the rename."""
    dest = new.lstrip("-").replace("-", "_")
    p.add_argument(new, metavar="CONN", default=None, dest=dest, help=help)
    p.add_argument(new.replace("storage-conn-id", "aws-conn-id"), dest=dest, action=RenamedOption, new=new,
                   metavar="CONN")


def add_store_options(p: argparse.ArgumentParser, *, stream: bool = True) -> None:
    p.add_argument("--store", required=True, help="file:///abs/path, /abs/path, s3://bucket/prefix or hdfs://namenode:8020/path")
    add_storage_conn_option(
        p, "--storage-conn-id",
        help="reach the store through this Airflow connection (AIRFLOW_CONN_<CONN> or Airflow's secrets "
        "backend): an aws one for s3:// (instead of the AWS_* variables), a streamstate_hdfs one for hdfs:// "
        "(instead of HADOOP_CONF_DIR)",
    )
    if stream:
        p.add_argument("--stream", required=True, help="the stream's name in the store")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def add_kafka_options(p: argparse.ArgumentParser, *, required: bool, help: str) -> None:
    """`--kafka-bootstrap` and, for a secured cluster, `--kafka-config FILE`."""
    p.add_argument("--kafka-bootstrap", required=required, metavar="HOST:PORT", help=help)
    p.add_argument("--kafka-config", metavar="FILE", default=None,
                   help="librdkafka client settings for that cluster, name=value per line "
                        "(security.protocol, sasl.*, ssl.*): what an Airflow Kafka connection gives the operators")


def kafka_config_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The `--kafka-config` file's settings (None without one; main() refuses one without
    --kafka-bootstrap)."""
    from airflow_provider_streamstate.engine.kafka.client_config import load_client_properties

    path = getattr(args, "kafka_config", None)
    return None if path is None else load_client_properties(path)


def add_mirror_options(p: argparse.ArgumentParser, *, topics: str = "a primary topic") -> None:
    """How the primary's topics are named in the DR cluster (`failover`, `pipeline failover`)."""
    p.add_argument("--topic-map", action="append", default=[], metavar="SRC=DST",
                   help=f"the DR name of {topics} (repeatable); overrides the replication policy")
    p.add_argument("--replication-policy", choices=("default", "identity"), default="default",
                   help="the mirror's naming: default `<source alias>.<topic>`, identity the same name")
    p.add_argument("--source-alias", default="primary",
                   help="the primary cluster's alias in MirrorMaker 2 (default: primary)")


def add_parallelism(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parallelism", type=int, default=8, metavar="N", help="concurrent file transfers (default 8)")


def duration(text: str) -> float:
    """An argparse type for `7d`, `12h`, `30m`: a bad one is a usage error (exit 2)."""
    from airflow_provider_streamstate.engine.core.config.values import parse_duration
    from airflow_provider_streamstate.engine.core.errors import UsageError

    try:
        return parse_duration(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(exc.one_line()) from None


def print_result(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=None, sort_keys=False))
    else:
        print(text)


def progress_for(args: argparse.Namespace) -> Any:
    return TerminalProgress(sys.stderr) if not args.json and sys.stderr.isatty() else None


def open_store_from_args(args: argparse.Namespace) -> Any:
    return open_store_with(args.store, getattr(args, "storage_conn_id", None), parallelism=getattr(args, "parallelism", 8))


def open_store_with(url: str, conn_id: str | None, *, parallelism: int = 8) -> Any:
    """The store at `url`, reached through Airflow connection `conn_id` when given (a spec's
    `storage_conn_id`, `--storage-conn-id`), else with the environment's credentials."""
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.stores import open_store

    if not conn_id:
        return open_store(url, parallelism=parallelism)
    # Airflow configures its logging at import, onto the stdout it finds then: send it to
    # stderr, warnings only, so `--json` output stays one document.
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    with contextlib.redirect_stdout(sys.stderr):
        try:
            from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
        except ImportError as exc:
            raise UsageError(
                f"--storage-conn-id needs Airflow: {exc}",
                hint="install apache-airflow (and its amazon provider for s3://), or configure the store from the "
                     "environment (AWS_* variables, HADOOP_CONF_DIR)",
            ) from None
        return StreamstateStoreHook(url, storage_conn_id=conn_id, parallelism=parallelism).store


def format_ms(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def read_spec(text: str) -> Any:
    """A StreamSpec from JSON or a file of it (UsageError otherwise)."""
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.spec import StreamSpec

    value = text
    if not text.lstrip().startswith("{"):
        path = Path(text).expanduser()
        if not path.is_file():
            raise UsageError(f"--spec {text!r} is neither JSON nor a file", hint="give the StreamSpec's JSON or its file")
        value = path.read_text()
    return StreamSpec.from_value(value)


def use_spec_connection(spec: Any) -> None:
    """This process's `spark` connection made from the spec when it names its master (what
    spark-submit goes through, as in the operators), and Airflow's logging quiet."""
    if spec.master:
        conn = {"conn_type": "spark", "host": spec.master, "extra": {"deploy-mode": spec.deploy_mode} if
                spec.deploy_mode else {}}
        os.environ.setdefault(f"AIRFLOW_CONN_{spec.spark_conn_id.upper()}", json.dumps(conn))
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
