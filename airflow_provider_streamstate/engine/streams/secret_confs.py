"""Keeping a stream's secrets off the spark-submit command line.

A command line is public on its host (`ps`, /proc/<pid>/cmdline) and is what launchers log,
so a Spark conf with a sensitive name (engine/core/config/redact.py: `spark.hadoop.fs.s3a.secret.key`,
`spark.yarn.appMasterEnv.AWS_SECRET_ACCESS_KEY`, a Kafka JAAS config) is moved from its
`--conf KEY=VALUE` into a properties file readable by this user only, which spark-submit
reads with `--properties-file`. spark-defaults.conf (which spark-submit then skips) and a
properties file the command already named are copied into ours first, so the same confs
apply as without it. The file lives on the launching host beside the driver log and is
deleted as soon as Spark has read it: by the supervised driver when it starts (client
mode), or by the launcher once spark-submit returns (cluster mode).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from airflow_provider_streamstate.engine.core.config.redact import is_sensitive

# The supervised driver deletes the file named here once it runs (Spark has read it by then).
ENV_SECRETS_FILE = "STREAMSTATE_SECRETS_FILE"


def remove_secrets_file() -> None:
    """In a driver launched here, once it runs: delete the file named by ENV_SECRETS_FILE
    (spark-submit has read it: the secrets now live in the driver's Spark conf only)."""
    path = os.environ.pop(ENV_SECRETS_FILE, None)
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


def split_secret_confs(command: Sequence[str]) -> tuple[list[str], dict[str, str], str | None]:
    """`command` without its sensitive `--conf` pairs, those pairs, and the properties file
    the command named (`--properties-file`), which the returned command no longer names."""
    out: list[str] = []
    secrets: dict[str, str] = {}
    named: str | None = None
    args = list(command)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--conf", "-c") and i + 1 < len(args):
            key, eq, value = args[i + 1].partition("=")
            if eq and is_sensitive(key):
                secrets[key] = value
                i += 2
                continue
        elif arg.startswith("--conf=") and is_sensitive(arg[len("--conf="):].partition("=")[0]):
            key, _, value = arg[len("--conf="):].partition("=")
            secrets[key] = value
            i += 1
            continue
        elif arg == "--properties-file" and i + 1 < len(args):
            named = args[i + 1]
            i += 2
            continue
        elif arg.startswith("--properties-file="):
            named = arg.partition("=")[2]
            i += 1
            continue
        out.append(arg)
        i += 1
    return out, secrets, named


def write_properties(path: Path, values: dict[str, str], *, merge_from: str | None = None) -> None:
    """A Java properties file of `values` (after the lines of `merge_from`, so ours win),
    created readable and writable by this user only."""
    lines: list[str] = []
    if merge_from:
        lines.extend(Path(merge_from).expanduser().read_text().splitlines())
    lines.extend(f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in values.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:  # how Spark reads it
        f.write("\n".join(lines) + "\n")


def spark_defaults(env: Mapping[str, str]) -> str | None:
    """The spark-defaults.conf spark-submit would read with `env` (SPARK_CONF_DIR, else
    SPARK_HOME/conf), if there is one."""
    for d in (env.get("SPARK_CONF_DIR"), f"{env['SPARK_HOME']}/conf" if env.get("SPARK_HOME") else None):
        if d and (Path(d) / "spark-defaults.conf").is_file():
            return str(Path(d) / "spark-defaults.conf")
    return None


def move_secrets_to_file(command: Sequence[str], path: Path, *, env: Mapping[str, str] | None = None
                         ) -> tuple[list[str], list[str]]:
    """`command` with its sensitive confs in the properties file `path` (written only when
    there is one), and the names of the confs moved. Naming a properties file makes
    spark-submit skip spark-defaults.conf, so the one `env` points at (or the file the
    command named) is copied into ours first: the same confs apply, on any Spark version."""
    rest, secrets, named = split_secret_confs(command)
    if not secrets:
        return list(command), []
    write_properties(path, secrets, merge_from=named or spark_defaults(env or {}))
    return [rest[0], "--properties-file", str(path), *rest[1:]], sorted(secrets)


def _escape(text: str, *, key: bool) -> str:
    """Java properties escaping: backslash, line breaks, `=`/`:`/`#`/`!` and leading (in
    keys, all) spaces, anything beyond ASCII as \\uXXXX."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif ch == " " and (key or i == 0):
            out.append("\\ ")
        elif ord(ch) > 0x7E:
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
