"""The JVM a test process's PySpark talks to. PySpark starts it on the process's first
SparkContext and keeps it for the life of the process, with the classpath of that first
context: a session made later (the shared `spark` fixture) with `spark.jars` still cannot
find the Kafka connector if an earlier test's engine code started Spark without it (a
reader's own session, stopped, leaves its JVM behind). Which test runs before which in a
worker depends on timing (`--dist loadfile`), so such a JVM is shut down after the test
that started it, as a fresh process would have it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

_shared: dict[str, Any] = {}


def mark_shared(session: Any) -> None:
    """Remember the shared session and its gateway (they stay for the whole run)."""
    _shared["session"] = session
    _shared["gateway"] = session.sparkContext._gateway  # noqa: SLF001 - PySpark has no public accessor


def stop_queries_left_running() -> list[str]:
    """Stop the queries still running in the shared session; their names (or ids). A query a
    file leaves running there goes on taking micro-batches, and the machine's CPU, through
    every later file the test process runs."""
    session = _shared.get("session")
    if session is None:
        return []
    try:
        left = list(session.streams.active)
    except Exception:  # noqa: BLE001 - a session whose JVM is gone runs no query (its tests say why)
        return []
    for query in left:
        query.stop()
    return [query.name or str(query.id) for query in left]


def current_gateway() -> Any:
    """This process's PySpark gateway, or None (pyspark is not imported for it)."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    return SparkContext._gateway  # noqa: SLF001 - PySpark has no public accessor


def shut_down_foreign_jvm(only: Any = None) -> bool:
    """Stop a JVM that is not the shared session's (its context first); True if there was one.
    `only`: stop it only if it is that gateway (one a test started). The class attributes
    are reset whatever happens, so a JVM that will not stop cannot fail every later test."""
    gateway = current_gateway()
    if gateway is None or gateway is _shared.get("gateway") or (only is not None and gateway is not only):
        return False
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    proc = getattr(gateway, "proc", None)
    try:
        if SparkContext._active_spark_context is not None:  # noqa: SLF001
            SparkSession.builder.getOrCreate().stop()
        gateway.shutdown()
    finally:
        SparkContext._gateway = None  # noqa: SLF001 - the next context starts a JVM of its own
        SparkContext._jvm = None  # noqa: SLF001
        if proc is not None:  # the JVM exits when its stdin closes (PythonGatewayServer)
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
    return True
