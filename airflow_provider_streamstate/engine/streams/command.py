"""Reading a spark-submit command line: the options the engine decides by (master, deploy
mode, a `--conf`). Pure Python, no dependency: the cluster managers and the submission
both read commands through it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_provider_streamstate.engine.core.config import hadoop_conf

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS


def option_value(command: Sequence[str], name: str) -> str | None:
    """The value of spark-submit option `name` in `command` (`--name V` or `--name=V`), or None."""
    for i, arg in enumerate(command):
        if arg == name and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
    return None


def conf_value(command: Sequence[str], key: str) -> str | None:
    """The value `command` gives Spark conf `key` (`--conf key=V`, `-c key=V`, `--conf=key=V`;
    the last one wins, as in spark-submit), or None."""
    found = None
    for i, arg in enumerate(command):
        pair = None
        if arg in ("--conf", "-c") and i + 1 < len(command):
            pair = command[i + 1]
        elif arg.startswith("--conf="):
            pair = arg[len("--conf="):]
        if pair is not None:
            k, eq, v = pair.partition("=")
            if eq and k == key:
                found = v
    return found


def master_of(command: Sequence[str]) -> str:
    """The command's master ("" when it names none: spark-submit then runs locally)."""
    return option_value(command, "--master") or ""


def cluster_deploy_mode(command: Sequence[str]) -> bool:
    """Whether the command asks for its driver on the cluster (`--deploy-mode cluster`)."""
    return option_value(command, "--deploy-mode") == "cluster"


def with_confs(command: Sequence[str], confs: Sequence[tuple[str, str]]) -> list[str]:
    """`command` with `--conf key=value` pairs right after spark-submit itself (before any
    of the command's own options and its application)."""
    return [command[0], *(a for k, v in confs for a in ("--conf", f"{k}={v}")), *command[1:]]


def access_confs_to_add(command: Sequence[str], confs: Mapping[str, str]) -> list[tuple[str, str]]:
    """Of the confs a store or checkpoint gives an application to reach it (`spark_access`),
    those `command` does not set itself, sorted: a conf the caller set stays. The HDFS
    client's properties (an HA nameservice's NameNodes) go whole or not at all: where the
    caller sets one of them, its own define the service. S3A's per-bucket properties stand
    each alone: a caller's endpoint for a bucket keeps the connection's credentials."""
    service = hadoop_conf.SPARK_PREFIX + "dfs."
    if any(conf_value(command, k) is not None for k in confs if k.startswith(service)):
        confs = {k: v for k, v in confs.items() if not k.startswith(service)}
    return sorted((k, v) for k, v in confs.items() if conf_value(command, k) is None)


def with_checkpoint_access(command: Sequence[str], env: Mapping[str, str],
                           checkpoint: CheckpointFS) -> tuple[list[str], dict[str, str], bool]:
    """`command` and spark-submit's environment `env` (on top of this process's) with what
    the application needs to reach `checkpoint` as the engine's connection to it does
    (`CheckpointFS.spark_access`: an HDFS connection's NameNodes and user), and whether it
    needed any. A conf the caller set stays (`access_confs_to_add`), and so does a variable
    of `env`: the caller's own choice, not this process's environment."""
    confs, access_env = checkpoint.spark_access({**os.environ, **env})
    added = access_confs_to_add(command, confs)
    return with_confs(command, added), {**access_env, **env}, bool(confs or access_env)


def without_option(command: Sequence[str], name: str) -> list[str]:
    """`command` without spark-submit option `name` (`--name V` and `--name=V`, every one)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(command):
        if skip:
            skip = False
        elif i > 0 and arg == name:
            skip = True
        elif not (i > 0 and arg.startswith(name + "=")):
            out.append(arg)
    return out
