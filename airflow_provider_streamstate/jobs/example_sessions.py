"""The second example stream: card-account sessions, written with transformWithStateInPandas.

Per account (the grouping key) a stateful processor keeps four state variables:

* `profile` (value state): lifetime `txn_count`, `total_cents`, `max_cents` and `sessions`
  (how many sessions it closed);
* `session` (list state, TTL `--session-ttl`): the open session's transactions;
* `bands` (map state, TTL `--bands-ttl`): transactions per amount band (`low`, `high`);
* a processing-time timer `--idle-timeout` after the account's last input.

A session closes when a transaction comes more than `--gap` of event time after the
previous one; it is then written once to the sessions topic as `{"kind": "session",
"account", "session_no", "start_ms", "end_ms", "txn_count", "total_cents"}`. What a session
contains depends on the input only, never on how it was split into batches, so a restored
copy continued over the same input writes exactly the sessions the original wrote after its
snapshot (`session_no` above the snapshot's `profile.sessions`). When the timer fires (no
input for the account for `--idle-timeout` of wall-clock time) an `{"kind": "idle",
"account", "open_txns", "since_ms"}` notice is written and the session stays open. TTL and
timers are processing time (Spark allows TTL only in that time mode): an abandoned session's
transactions and an idle account's bands expire on their own. With timers registered, Spark
runs a batch at every trigger, so an `available-now` run of this stream does not end: run it
with a processing-time trigger and stop it.

Run with spark-submit (with the Kafka connector jars) or call `start_query` from Python.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.jobs.example_stream import StreamArgs, transactions, with_trigger

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

HIGH_BAND_CENTS = 50_000
DAY_MS = 86_400_000
OUTPUT_SCHEMA = "key string, value string"
PROFILE_SCHEMA = "txn_count long, total_cents long, max_cents long, sessions long"
SESSION_SCHEMA = "txn_id string, amount_cents long, ts_ms long"


@dataclass(frozen=True)
class SessionArgs:
    bootstrap_servers: str
    checkpoint: str
    source_topic: str = "transactions"
    sessions_topic: str = "sessions"
    gap_ms: int = 120_000
    idle_timeout_ms: int = 600_000
    session_ttl_ms: int = DAY_MS
    bands_ttl_ms: int = 7 * DAY_MS
    trigger: str = "processing:2 seconds"  # or "available-now"
    max_offsets_per_trigger: int | None = None
    query_name: str | None = None
    partitions: int = 3  # of the topics main() creates when they are missing


def _processor_class() -> type:
    """The StatefulProcessor, defined on first use: pyspark is not imported at module level."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class AccountSessions(StatefulProcessor):  # type: ignore[misc]
        """Sessions per account; see the module docstring."""

        def __init__(self, gap_ms: int, idle_timeout_ms: int, session_ttl_ms: int, bands_ttl_ms: int) -> None:
            self.gap_ms = gap_ms
            self.idle_timeout_ms = idle_timeout_ms
            self.session_ttl_ms = session_ttl_ms
            self.bands_ttl_ms = bands_ttl_ms

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.profile = handle.getValueState("profile", PROFILE_SCHEMA)
            self.session = handle.getListState("session", SESSION_SCHEMA, self.session_ttl_ms)
            self.bands = handle.getMapState("bands", "band string", "txn_count long", self.bands_ttl_ms)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            import pandas as pd

            account = str(key[0])
            batch = pd.concat(list(rows), ignore_index=True).sort_values(["ts_ms", "txn_id"])
            profile = list(self.profile.get()) if self.profile.exists() else [0, 0, 0, 0]
            session = list(self.session.get()) if self.session.exists() else []
            closed: list[dict[str, Any]] = []
            band_counts: dict[str, int] = {}
            for txn_id, amount, ts in zip(batch["txn_id"], batch["amount_cents"], batch["ts_ms"], strict=True):
                amount, ts = int(amount), int(ts)
                if session and ts > max(t[2] for t in session) + self.gap_ms:
                    profile[3] += 1
                    closed.append(_session_record(account, profile[3], session))
                    session = []
                session.append((str(txn_id), amount, ts))
                profile[0] += 1
                profile[1] += amount
                profile[2] = max(profile[2], amount)
                band = "high" if amount >= HIGH_BAND_CENTS else "low"
                band_counts[band] = band_counts.get(band, 0) + 1
            self.profile.update(tuple(profile))
            self.session.put(session)
            for band, n in band_counts.items():
                old = self.bands.getValue((band,))
                self.bands.updateValue((band,), ((old[0] if old else 0) + n,))
            for expiry in list(self.handle.listTimers()):
                self.handle.deleteTimer(expiry)
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + self.idle_timeout_ms)
            if closed:
                yield _output(closed)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            if not self.session.exists():
                return
            session = list(self.session.get())
            yield _output([{"kind": "idle", "account": str(key[0]), "open_txns": len(session),
                            "since_ms": min(int(t[2]) for t in session)}])

        def close(self) -> None:
            pass

    return AccountSessions


def _session_record(account: str, number: int, session: list[Any]) -> dict[str, Any]:
    times = [int(t[2]) for t in session]
    return {"kind": "session", "account": account, "session_no": number, "start_ms": min(times),
            "end_ms": max(times), "txn_count": len(session), "total_cents": sum(int(t[1]) for t in session)}


def _output(records: list[dict[str, Any]]) -> pd.DataFrame:
    import json

    import pandas as pd

    return pd.DataFrame({"key": [r["account"] for r in records],
                         "value": [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in records]})


def account_sessions(txns: DataFrame, args: SessionArgs) -> DataFrame:
    processor = _processor_class()(args.gap_ms, args.idle_timeout_ms, args.session_ttl_ms, args.bands_ttl_ms)
    return (
        txns.select("account", "txn_id", "amount_cents", "ts_ms")
        .groupBy("account")
        .transformWithStateInPandas(processor, OUTPUT_SCHEMA, "Append", "ProcessingTime")
    )


def start_query(spark: SparkSession, args: SessionArgs) -> StreamingQuery:
    """Start the stream; it resumes from `args.checkpoint` when that holds committed batches.
    transformWithState needs the RocksDB state store: start `spark` with it."""
    txns = transactions(spark, StreamArgs(args.bootstrap_servers, args.checkpoint, source_topic=args.source_topic,
                                          max_offsets_per_trigger=args.max_offsets_per_trigger))
    writer = (
        account_sessions(txns, args).writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("topic", args.sessions_topic)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .queryName(args.query_name or "streamstate-example-sessions")
    )
    return with_trigger(writer, args.trigger).start()


def parse_args(argv: list[str] | None = None) -> tuple[SessionArgs, str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--checkpoint", required=True, help="checkpoint location (path or URI)")
    p.add_argument("--source-topic", default="transactions")
    p.add_argument("--sessions-topic", default="sessions")
    p.add_argument("--gap-ms", type=int, default=120_000, help="event time without a transaction that ends a session")
    p.add_argument("--idle-timeout-ms", type=int, default=600_000,
                   help="wall-clock time without input after which an account's open session is reported idle")
    p.add_argument("--session-ttl-ms", type=int, default=DAY_MS)
    p.add_argument("--bands-ttl-ms", type=int, default=7 * DAY_MS)
    p.add_argument("--trigger", default="processing:2 seconds", help="'available-now' or 'processing:<interval>'")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument("--state-store", default="rocksdb-changelog", choices=("rocksdb", "rocksdb-changelog"),
                   help="transformWithState runs on RocksDB only")
    p.add_argument("--partitions", type=int, default=3, help="partitions of the topics it creates when missing")
    a = p.parse_args(argv)
    return (
        SessionArgs(
            bootstrap_servers=a.bootstrap_servers, checkpoint=a.checkpoint, source_topic=a.source_topic,
            sessions_topic=a.sessions_topic, gap_ms=a.gap_ms, idle_timeout_ms=a.idle_timeout_ms,
            session_ttl_ms=a.session_ttl_ms,
            bands_ttl_ms=a.bands_ttl_ms, trigger=a.trigger, max_offsets_per_trigger=a.max_offsets_per_trigger,
            partitions=a.partitions,
        ),
        f"{a.state_store}:{a.shuffle_partitions}",
    )


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point, as the first example's (signals, heartbeat, batch log)."""
    from airflow_provider_streamstate.jobs.runtime import run_example_stream

    args, store = parse_args(argv)
    state_store, shuffle = store.split(":")
    return run_example_stream(
        "streamstate-example-sessions", bootstrap_servers=args.bootstrap_servers,
        topics=[args.source_topic, args.sessions_topic], partitions=args.partitions, checkpoint=args.checkpoint,
        state_store=state_store, shuffle_partitions=int(shuffle), start=lambda spark: start_query(spark, args),
    )


if __name__ == "__main__":
    sys.exit(main())
