"""The driver-side helpers that need no Spark: the one line that says why a query failed
(Spark's first line, or the Python exception's own line when the error came from Python),
and how stop signals are counted (a terminal's Ctrl-C reaches the JVM and the Python
process once each: one request; a second signal to the same process exits at once)."""

from __future__ import annotations

import pytest

from airflow_provider_streamstate.jobs import runtime
from airflow_provider_streamstate.jobs.runtime import StopSignals, error_line

PY4J_PROXY = """py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/app/job.py", line 85, in explode
    raise RuntimeError(f"card processor unreachable in batch {batch_id}")
RuntimeError: card processor unreachable in batch 1
second line of the message

	at py4j.Protocol.getReturnValue(Protocol.java:476)
"""

SPARK = """org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query [id = 1] terminated with exception: Partition t-0's offset was changed from 70 to 0
=== Streaming Query ===
Identifier: accounts
"""


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (SPARK, "org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query [id = 1] terminated "
                "with exception: Partition t-0's offset was changed from 70 to 0"),
        (PY4J_PROXY, "RuntimeError: card processor unreachable in batch 1"),
        ("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyboardInterrupt\n", "KeyboardInterrupt"),
        ("boom\x1b[2J\x00 done", "boom [2J  done"),
        (None, None),
        ("  \n ", None),
    ],
)
def test_the_failure_line_says_why(text: str | None, line: str | None) -> None:
    assert error_line(text) == line


def test_the_failure_line_is_bounded() -> None:
    line = error_line("x" * 5000, limit=100)
    assert line is not None and len(line) == 100 and line.endswith("…")


def test_one_ctrl_c_reaching_both_processes_is_one_request_a_second_exits(monkeypatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(runtime.os, "_exit", exits.append)
    stop = StopSignals()
    stop.request("SIGINT", source="python")
    stop.request("SIGINT", source="jvm")  # the same Ctrl-C, seen by Spark's JVM
    assert stop.requested.is_set() and stop.reason == "SIGINT" and exits == []
    stop.request("SIGINT", source="jvm")  # pressed again
    assert exits == [130]


def test_a_second_sigterm_exits_with_143(monkeypatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(runtime.os, "_exit", exits.append)
    stop = StopSignals()
    stop.request("SIGTERM", source="jvm")
    stop.request("SIGTERM", source="jvm")
    assert (stop.reason, exits) == ("SIGTERM", [143])


class _Query:
    """What run_until_stopped asks of a StreamingQuery: active until stopped, then `error`."""

    name, id, lastProgress, status = "accounts", "q", None, {"isTriggerActive": False}  # noqa: N815

    def __init__(self, error: str | None, *, ends_by_itself: bool = False) -> None:
        self.isActive, self.error = not ends_by_itself, error  # noqa: N815

    def awaitTermination(self, _timeout: float) -> None:  # noqa: N802
        pass

    def stop(self) -> None:
        self.isActive = False

    def exception(self) -> str | None:
        return None if self.isActive else self.error


class _Spark:
    def stop(self) -> None:
        pass


INTERRUPTED = ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 failed: "
               "java.lang.InterruptedException\n\tat java.base/java.util.concurrent.locks.AbstractQueuedSynchronizer"
               ".acquireSharedInterruptibly(AbstractQueuedSynchronizer.java:1048)")


@pytest.mark.parametrize(
    ("error", "ends_by_itself", "code", "said"),
    [
        (INTERRUPTED, False, 0, "the stop interrupted a batch that was not committed"),
        (INTERRUPTED, True, 1, "the query failed"),  # nobody stopped it: an interrupt is a failure
        (SPARK, False, 1, "the query failed"),  # stopped, but failed of something else
        (None, False, 0, "stopped on signal SIGTERM"),
    ],
)
def test_a_batch_the_stop_itself_interrupted_is_a_clean_stop_and_nothing_else_is(
    capsys, error: str | None, ends_by_itself: bool, code: int, said: str
) -> None:
    stop = StopSignals()
    stop.request("signal SIGTERM")
    assert runtime.run_until_stopped(_Spark(), _Query(error, ends_by_itself=ends_by_itself), stop) == code  # type: ignore[arg-type]
    assert said in capsys.readouterr().err


# What a Ctrl-C to spark-submit's process group does to a batch writing a file on a local
# checkpoint: it kills the `chmod` Spark's local filesystem runs for the file (exit 130).
CHMOD_KILLED = ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 2 in stage 7.0 failed 1 "
                "times, most recent failure: Lost task 2.0 in stage 7.0 (TID 29) (127.0.0.1 executor driver): "
                "java.io.IOException\n\tat org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStore"
                ".commit(HDFSBackedStateStoreProvider.scala:150)\nCaused by: ExitCodeException exitCode=130: \n"
                "\tat org.apache.hadoop.util.Shell.runCommand(Shell.java:1068)")


@pytest.mark.parametrize(
    ("reason", "code", "said"),
    [
        ("SIGINT", 0, "the stop interrupted a batch that was not committed"),  # Ctrl-C killed the write
        ("signal SIGINT", 0, "the stop interrupted a batch that was not committed"),  # the supervised wrapper's
        ("SIGTERM", 1, "the query failed"),  # 130 is SIGINT's mark: a SIGTERM did not kill that write
        ("stop requested by task stop", 1, "the query failed"),  # no signal at all
    ],
)
def test_a_file_write_killed_by_the_stops_own_signal_is_a_clean_stop_even_before_the_driver_stopped_the_query(
    capsys, reason: str, code: int, said: str
) -> None:
    stop = StopSignals()
    stop.request(reason)
    # The signal reached the write before the driver's stop: the query ended by itself.
    assert runtime.run_until_stopped(_Spark(), _Query(CHMOD_KILLED, ends_by_itself=True), stop) == code  # type: ignore[arg-type]
    assert said in capsys.readouterr().err


def test_the_cause_below_a_driver_side_error_counts_and_the_reported_error_stays_its_own_text() -> None:
    top = "[STREAM_FAILED] Query [id = 1] terminated with exception: "  # PySpark's text of a failed commit-log write
    trace = f"org.apache.spark.sql.streaming.StreamingQueryException: {top}\nCaused by: ExitCodeException exitCode=143: "
    assert runtime.query_error(top, stopping=False, signalled=143, trace=trace) is None
    assert runtime.query_error(top, stopping=False, signalled=130, trace=trace) == top
    assert runtime.query_error(top, stopping=False, signalled=None, trace=trace) == top
    assert runtime.query_error(None, stopping=True, signalled=143) is None


def test_a_spawn_helper_the_stops_signal_killed_before_chmod_started_is_the_stops_doing_too() -> None:
    """A Ctrl-C can reach Java's spawn helper before it has started `chmod`: the write then
    fails with the helper's signal, not chmod's exit status."""
    top = "[STREAM_FAILED] Query [id = 1] terminated with exception: "
    trace = (f"{top}\nCaused by: java.io.IOException: Cannot run program \"chmod\": error=0, Failed to exec "
             "spawn helper: pid: 25742, signal: 2\n\tat java.base/java.lang.ProcessBuilder.start")
    assert runtime.query_error(top, stopping=False, signalled=130, trace=trace) is None  # SIGINT: 2
    assert runtime.query_error(top, stopping=False, signalled=143, trace=trace) == top  # SIGTERM's is 15
    assert runtime.query_error(top, stopping=False, signalled=None, trace=trace) == top


def test_the_stops_signal_is_known_to_whoever_asked_when_it_comes_or_at_once_if_it_came() -> None:
    stop = StopSignals()
    early: list[int | None] = []
    stop.on_request(lambda s: early.append(s.signal_exit))
    assert early == [] and stop.signal_exit is None
    stop.request("SIGTERM", source="jvm")
    late: list[int | None] = []
    stop.on_request(lambda s: late.append(s.signal_exit))
    assert early == late == [143]
