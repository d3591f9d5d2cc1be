"""Hadoop's local filesystem without a process per chmod or readlink, for the tests' Spark
JVMs (jvm/local-fs, built by `make setup`).

pyspark ships no native Hadoop library, so each file and directory Spark writes on a local
checkpoint cost a `chmod` process and, through FileContext's rename, `readlink` ones: about a
dozen per micro-batch of a small stateful query, 60% of its CPU (docs/testing.md). The jar
names its classes in its own core-site.xml, so a JVM uses them only with the jar on its class
path: SPARK_DIST_CLASSPATH, which spark-submit appends after Spark's jars (the class data
sharing archive still matches) and Spark's YARN client adds to its containers' class path.
A driver's Hadoop configuration goes to its executors, so each executor needs the jar as well:
local mode and YARN here have it; the standalone cluster's worker inherits it from the test
process that starts it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dev.stack import JARS

LOCAL_FS_JAR = JARS / "local-fs" / "streamstate-local-fs.jar"
ENV = "SPARK_DIST_CLASSPATH"


def with_local_fs(classpath: str | None, jar: Path = LOCAL_FS_JAR) -> str | None:
    """`classpath` (SPARK_DIST_CLASSPATH's value, if any) with the jar appended once, when it
    is built; as it was otherwise."""
    entries = [e for e in (classpath or "").split(os.pathsep) if e]
    if jar.is_file() and str(jar) not in entries:
        entries.append(str(jar))
    return os.pathsep.join(entries) or classpath


def without_local_fs(classpath: str | None, jar: Path = LOCAL_FS_JAR) -> str | None:
    """`classpath` without the jar (None when nothing else was on it): Hadoop's own local
    filesystem."""
    entries = [e for e in (classpath or "").split(os.pathsep) if e and e != str(jar)]
    return os.pathsep.join(entries) or None


def hadoops_own(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a Spark JVM on Hadoop's own local filesystem: the jar taken off
    SPARK_DIST_CLASSPATH, anything else on it kept."""
    out = dict(env)
    if (classpath := without_local_fs(out.pop(ENV, None))) is not None:
        out[ENV] = classpath
    return out
