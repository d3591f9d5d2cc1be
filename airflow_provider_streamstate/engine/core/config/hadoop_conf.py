"""A Hadoop client's configuration, read the way Hadoop reads it: the `*-site.xml` files in
`HADOOP_CONF_DIR` (or, for YARN, `YARN_CONF_DIR` first), with `${other.key}` references
expanded as `Configuration.get` expands them. In a YARN container of a Spark application the
configuration spark-submit was given comes first, as on Spark's classpath there: Spark ships
it in the container's `__spark_conf__/__hadoop_conf__`.

What spark-submit finds there is what the engine must find too: the ResourceManager a
YARN driver is watched through (engine/streams/managers/yarn.py) and the NameNode's WebHDFS
address behind an `hdfs://` location (backends/hdfs/checkpoint.py). Pure Python.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from airflow_provider_streamstate.engine.core.errors import UsageError

_REFERENCE = re.compile(r"\$\{([^}]+)\}")
SHIPPED_CONF_DIR = Path("__spark_conf__") / "__hadoop_conf__"  # below a Spark YARN container's working dir
SPARK_PREFIX = "spark.hadoop."  # a Spark conf with this prefix is a property of the application's Hadoop configuration


def conf_dirs(env: Mapping[str, str] | None = None, *, yarn: bool = False) -> list[Path]:
    """The configuration directories a Hadoop client reads, most specific first."""
    environ = {**os.environ, **(env or {})}
    names = ("YARN_CONF_DIR", "HADOOP_CONF_DIR") if yarn else ("HADOOP_CONF_DIR",)
    shipped = Path.cwd() / SHIPPED_CONF_DIR
    return [*([shipped] if shipped.is_dir() else []), *(Path(environ[n]) for n in names if environ.get(n))]


def site_file(name: str, env: Mapping[str, str] | None = None, *, yarn: bool = False) -> Path | None:
    """The first `name` (e.g. `yarn-site.xml`) in the configuration directories, or None."""
    for d in conf_dirs(env, yarn=yarn):
        if (d / name).is_file():
            return d / name
    return None


def read_site(path: Path) -> dict[str, str]:
    """The properties of one `*-site.xml`, references expanded; UsageError naming the file
    when it cannot be parsed."""
    props: dict[str, str] = {}
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise UsageError(f"cannot read the Hadoop configuration {path}: {exc}",
                         hint="point HADOOP_CONF_DIR (YARN_CONF_DIR) at the cluster's configuration") from None
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            props[name.strip()] = value.strip()
    return expand(props)


def expand(props: Mapping[str, str]) -> dict[str, str]:
    """`${key}` references replaced by the referenced values (five levels deep, as Hadoop's
    own bound is 20 and real configurations use one or two)."""
    out = dict(props)
    for name, value in out.items():
        for _ in range(5):
            expanded = _REFERENCE.sub(lambda m: out.get(m.group(1), m.group(0)), value)
            if expanded == value:
                break
            value = expanded
        out[name] = value
    return out


def load(*names: str, env: Mapping[str, str] | None = None, yarn: bool = False) -> dict[str, str]:
    """The properties of the named site files together (later files win), {} when there are none."""
    out: dict[str, str] = {}
    for name in names:
        path = site_file(name, env, yarn=yarn)
        if path is not None:
            out.update(read_site(path))
    return expand(out)
