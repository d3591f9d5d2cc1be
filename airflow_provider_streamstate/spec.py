"""A stream, described once: what every task that snapshots, restores, starts, watches or
clones it needs to know, as a small typed value that DAG authors write, Airflow templates
and XCom carries (`to_dict()` is plain JSON); and where a state job's Spark application
runs (`SparkJobOptions`), the other value they write.

    orders = StreamSpec(
        name="orders",
        application="/opt/jobs/orders.py",
        application_args=["--checkpoint", "{checkpoint}", "--alerts-topic", "{sinks[alerts]}"],
        checkpoint="/data/checkpoints/orders",
        store="s3://snapshots/prod", storage_conn_id="aws_snapshots",
        kafka_conn_id="kafka_prod", sinks={"alerts": "orders-alerts"},
    )

`application_args` may name the spec's own `{checkpoint}`, `{name}` and `{sinks[KEY]}`:
a clone is the same spec with another name, checkpoint and sinks, and its arguments
follow. Pure Python: no Airflow, pyspark or boto3 import.
"""

from __future__ import annotations

import functools
import json
import string
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

from airflow_provider_streamstate.engine.core.config.redact import (
    REDACTED,
    redact_command,
    redact_mapping,
    sensitive_values,
)
from airflow_provider_streamstate.engine.core.config.renamed import renamed_argument, with_current_names
from airflow_provider_streamstate.engine.core.config.values import optional_duration
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.core.manifest import validate_stream_name

_PLACEHOLDERS = {"checkpoint", "name", "sinks"}


@dataclass
class StreamSpec:
    """One stream: its Spark application, checkpoint, snapshot store and connections."""

    name: str
    checkpoint: str
    store: str
    application: str = ""
    application_args: list[str] = field(default_factory=list)
    storage_conn_id: str | None = None  # the store's and checkpoint's Airflow connection: `aws` (S3), `streamstate_hdfs` (HDFS)
    kafka_conn_id: str | None = None  # the stream's Kafka cluster, an Airflow `kafka` connection
    spark_conn_id: str = "spark_default"  # the `spark` connection: master, deploy mode, spark-binary
    master: str | None = None  # overrides the spark connection's master (e.g. local[2])
    deploy_mode: str | None = None  # overrides the spark connection's deploy mode (client | cluster)
    conf: dict[str, str] = field(default_factory=dict)
    jars: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    sinks: dict[str, str] = field(default_factory=dict)  # where it writes: topics, paths
    spark_version: str | None = None
    heartbeat_interval_s: float = 5.0
    # This package's code as a zip in the driver's py-files, so that the cluster's Python
    # needs no copy of it: None ships it where the driver runs on the cluster (cluster deploy
    # mode on YARN; on Kubernetes with spark.kubernetes.file.upload.path); False: the
    # cluster's Python has this package, of the version that submits.
    ship_code: bool | None = None

    # Airflow renders these when a spec is an operator's templated argument.
    template_fields: ClassVar[tuple[str, ...]] = (
        "checkpoint", "store", "application", "application_args", "master", "deploy_mode", "conf", "sinks", "env",
    )

    def __post_init__(self) -> None:
        validate_stream_name(self.name)
        for attr in ("checkpoint", "store"):
            if not isinstance(getattr(self, attr), str) or not getattr(self, attr):
                raise UsageError(f"stream {self.name}: {attr} is required", hint=f"give the stream's {attr}")
        for attr in ("application_args", "jars"):
            if not all(isinstance(x, str) for x in getattr(self, attr)):
                raise UsageError(f"stream {self.name}: {attr} must be a list of strings")
        for attr in ("conf", "env", "sinks"):
            value = getattr(self, attr)
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                raise UsageError(f"stream {self.name}: {attr} must map strings to strings")
        if self.deploy_mode not in (None, "client", "cluster"):
            raise UsageError(f"stream {self.name}: deploy_mode must be client or cluster, not {self.deploy_mode!r}")
        if not isinstance(self.heartbeat_interval_s, int | float) or not 0 < self.heartbeat_interval_s <= 600:
            raise UsageError(f"stream {self.name}: heartbeat_interval_s must be in (0, 600] seconds")
        for arg in self.application_args:
            for _, name, _, _ in string.Formatter().parse(arg):
                if name is not None and name.split("[")[0].split(".")[0] not in _PLACEHOLDERS:
                    raise UsageError(
                        f"stream {self.name}: argument {arg!r} names {{{name}}}",
                        hint="arguments may name {checkpoint}, {name} and {sinks[KEY]}; write a literal brace as {{ or }}",
                    )

    @property
    def aws_conn_id(self) -> str | None:
        """The old name of `storage_conn_id` (read with a deprecation warning)."""
        warnings.warn("StreamSpec.aws_conn_id is renamed storage_conn_id", DeprecationWarning, stacklevel=2)
        return self.storage_conn_id

    def resolved_args(self) -> list[str]:
        """`application_args` with `{checkpoint}`, `{name}` and `{sinks[KEY]}` filled in."""
        out = []
        for arg in self.application_args:
            try:
                out.append(arg.format(checkpoint=self.checkpoint, name=self.name, sinks=self.sinks))
            except (KeyError, IndexError, ValueError) as exc:
                raise UsageError(
                    f"stream {self.name}: argument {arg!r} cannot be filled in ({exc})",
                    hint=f"its sinks are {sorted(self.sinks) or 'none'}; name one of them",
                ) from None
        return out

    def secret_values(self) -> list[str]:
        """The values of its confs, environment and argument options with sensitive names
        (engine/core/config/redact.py): what must never be written down or shown."""
        return sensitive_values(conf=self.conf, env=self.env, args=self.application_args)

    def redacted(self) -> StreamSpec:
        """The same stream with its secrets as `***`: what XCom, trigger records and reports
        may carry (a task completes it again from the configured streams: utils/configured_streams.py)."""
        return replace(self, conf=redact_mapping(self.conf), env=redact_mapping(self.env),
                       application_args=redact_command(self.application_args))

    def is_redacted(self) -> bool:
        """Whether some secret of it reads `***` (it came through XCom or a trigger)."""
        return REDACTED in self.secret_values()

    def derive(self, **changes: Any) -> StreamSpec:
        """The same stream with some fields changed (a clone: name, checkpoint, sinks)."""
        if "aws_conn_id" in changes:  # the old name, replacing the connection
            changes["storage_conn_id"] = renamed_argument(changes, "storage_conn_id", changes.get("storage_conn_id"),
                                                          owner="StreamSpec.derive")
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_value(cls, value: StreamSpec | dict[str, Any] | str) -> StreamSpec:
        """A spec from itself, its `to_dict()` or that as JSON (what XCom and Params carry)."""
        if isinstance(value, StreamSpec):
            return value
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise UsageError("a stream spec given as text must be JSON", hint="pass StreamSpec(...).to_dict()") from None
        if not isinstance(value, dict):
            raise UsageError(f"a stream spec must be a StreamSpec or a dict, not {type(value).__name__}")
        value = with_current_names(value, what=f"stream {value.get('name')}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise UsageError(f"unknown stream spec field(s) {', '.join(unknown)}", hint=f"fields are {', '.join(sorted(known))}")
        try:
            return cls(**value)
        except TypeError as exc:
            raise UsageError(f"invalid stream spec: {exc}", hint="give at least name, checkpoint and store") from None


_generated_init = StreamSpec.__init__


@functools.wraps(_generated_init)
def _init_reading_old_names(self: StreamSpec, *args: Any, **kwargs: Any) -> None:
    """The dataclass's `__init__`, also taking `aws_conn_id` (DAG files written before the rename)."""
    if "aws_conn_id" in kwargs:
        kwargs["storage_conn_id"] = renamed_argument(kwargs, "storage_conn_id", kwargs.get("storage_conn_id"),
                                                     owner="StreamSpec")
    _generated_init(self, *args, **kwargs)


setattr(StreamSpec, "__init__", _init_reading_old_names)  # noqa: B010 - a method mypy would refuse to assign


@dataclass
class SparkJobOptions:
    """Where and how a Spark application of this package runs (a state job: validation,
    report, bisect), as one templated value.

    :param conn_id: the Spark connection to submit to (its master and deploy mode: YARN,
        Kubernetes, standalone, local). None: the job runs in the task, on a local Spark
        session, with the snapshot copied to the worker's disk.
    :param deploy_mode: `client` or `cluster`; default the connection's.
    :param conf: Spark confs of the application (executors, memory, S3A, ...).
    :param jars: jars the application needs (the S3A connector for an S3 store).
    :param env: environment of spark-submit and of a driver that runs here (HADOOP_CONF_DIR...).
    :param timeout: how long the application may run before it is killed (`30m`, seconds);
        None: no limit.
    :param ship_code: whether the application gets this package's code as a zip in its
        py-files, so that the cluster's Python needs only pyspark (and Great Expectations to
        validate); None: on a cluster (any master but `local`); False: the cluster's Python
        has this package, of the version that submits.
    """

    conn_id: str | None = None
    deploy_mode: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    jars: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout: str | float | None = None
    ship_code: bool | None = None

    # Airflow renders these when the value is an operator's templated argument.
    template_fields: ClassVar[tuple[str, ...]] = ("conn_id", "deploy_mode", "conf", "jars", "env", "timeout")

    @classmethod
    def of(cls, value: SparkJobOptions | Mapping[str, Any] | None) -> SparkJobOptions:
        """The options as given: this value, its dict (from a DAG's JSON), or none at all."""
        if value is None:
            return cls()
        if isinstance(value, SparkJobOptions):
            return value
        if not isinstance(value, Mapping):
            raise UsageError(f"spark must be SparkJobOptions or a dict, not {type(value).__name__}",
                             hint="pass SparkJobOptions(conn_id=..., conf={...})")
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise UsageError(f"unknown Spark job option(s) {', '.join(unknown)}",
                             hint=f"they are {', '.join(cls.__dataclass_fields__)}")
        return cls(**dict(value))

    @property
    def on_cluster(self) -> bool:
        return bool(self.conn_id)

    @property
    def timeout_s(self) -> float | None:
        return optional_duration(self.timeout, "the Spark job's timeout")

    def jar_list(self) -> list[str]:
        return self.jars.split(",") if isinstance(self.jars, str) else list(self.jars or [])
