"""A deterministic generator of JSON card transactions for the example stream.

Event `i` of seed `s` is always the same, whatever the chunking: tests, the demo and
the benchmarks can produce in rounds and still compute exactly what the stream's state
must hold (`expected_aggregates`). Duplicates (a producer retrying a send) can be mixed
in; the stream drops them, and so do the expected aggregates.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

START_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Transaction:
    txn_id: str
    account: str
    amount_cents: int
    ts_ms: int

    def to_json(self) -> bytes:
        return json.dumps(
            {"txn_id": self.txn_id, "account": self.account, "amount_cents": self.amount_cents, "ts_ms": self.ts_ms},
            separators=(",", ":"),
        ).encode()


@dataclass(frozen=True)
class GeneratorSpec:
    """What to generate: `events` transactions from index `first` over `accounts` accounts."""

    seed: int = 7
    accounts: int = 50
    events: int = 1000
    first: int = 0
    step_ms: int = 1000  # event time advances this much per transaction
    duplicate_rate: float = 0.0  # share of transactions sent twice

    def next_round(self, events: int | None = None) -> GeneratorSpec:
        """The spec of the transactions that follow this one's (same seed and accounts)."""
        n = self.events if events is None else events
        return GeneratorSpec(self.seed, self.accounts, n, self.first + self.events, self.step_ms, self.duplicate_rate)


def transaction(seed: int, index: int, accounts: int, step_ms: int = 1000) -> Transaction:
    """Transaction number `index` of `seed`: a pure function of its arguments."""
    rnd = random.Random(f"{seed}:{index}")
    return Transaction(
        txn_id=f"t{seed}-{index:09d}",
        account=f"acct-{rnd.randrange(accounts):05d}",
        amount_cents=rnd.randint(1, 100_000),
        ts_ms=START_MS + index * step_ms,
    )


def transactions(spec: GeneratorSpec) -> Iterator[Transaction]:
    for i in range(spec.first, spec.first + spec.events):
        yield transaction(spec.seed, i, spec.accounts, spec.step_ms)


def messages(spec: GeneratorSpec) -> Iterator[Transaction]:
    """What goes on the wire: every transaction, some of them twice (deterministically)."""
    for txn in transactions(spec):
        yield txn
        if spec.duplicate_rate and random.Random(f"dup:{txn.txn_id}").random() < spec.duplicate_rate:
            yield txn


def expected_aggregates(specs: Iterable[GeneratorSpec]) -> dict[str, dict[str, int]]:
    """Per account: `count`, `sum` and `max` of amount_cents over distinct transactions."""
    out: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    for spec in specs:
        for txn in transactions(spec):
            if txn.txn_id in seen:
                continue
            seen.add(txn.txn_id)
            agg = out.setdefault(txn.account, {"count": 0, "sum": 0, "max": 0})
            agg["count"] += 1
            agg["sum"] += txn.amount_cents
            agg["max"] = max(agg["max"], txn.amount_cents)
    return out


def ensure_topic(bootstrap: str, topic: str, partitions: int = 3, timeout: float = 30.0) -> None:
    """Create `topic` with `partitions` partitions unless it exists (confluent-kafka AdminClient)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=timeout).topics:
        return
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    deadline = time.monotonic() + timeout
    while topic not in admin.list_topics(timeout=timeout).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} not visible after {timeout}s")
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, spec: GeneratorSpec, rate: float | None = None,
            per_transaction: int | None = None) -> int:
    """Send `spec`'s messages keyed by account, waiting for every ack; returns messages sent.

    `rate` limits messages per second (None: as fast as the broker takes them).
    `per_transaction`: send them in committed Kafka transactions of that many messages, as
    exactly-once producers do; each commit marker takes an offset that mirrors do not copy,
    so offsets differ between a cluster and its mirror.
    """
    import uuid

    from confluent_kafka import Producer

    config: dict[str, object] = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 5}
    if per_transaction:
        config["transactional.id"] = f"streamstate-generator-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    if per_transaction:
        producer.init_transactions(30)
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    sent = 0
    started = time.monotonic()
    for txn in messages(spec):
        if per_transaction and sent % per_transaction == 0:
            if sent:
                producer.commit_transaction(30)
            producer.begin_transaction()
        while True:
            try:
                producer.produce(topic, key=txn.account.encode(), value=txn.to_json(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
        if rate:
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    if per_transaction and sent:
        producer.commit_transaction(30)
    remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"{remaining} messages not delivered; first error: {errors[:1]}")
    return sent


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Produce deterministic transactions to Kafka.")
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--topic", default="transactions")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--accounts", type=int, default=50)
    p.add_argument("--events", type=int, default=1000)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--rate", type=float, default=None, help="messages per second")
    p.add_argument("--duplicate-rate", type=float, default=0.0)
    p.add_argument("--per-transaction", type=int, default=None, metavar="N",
                   help="send in committed Kafka transactions of N messages (commit markers take offsets)")
    p.add_argument(
        "--expected", metavar="PATH",
        help="also write, as JSON, the per-account aggregates {account: {count, sum, max}} the stream must "
        "hold after consuming events 0..first+events-1 of this seed",
    )
    a = p.parse_args(argv)
    ensure_topic(a.bootstrap_servers, a.topic, a.partitions)
    spec = GeneratorSpec(a.seed, a.accounts, a.events, a.first, duplicate_rate=a.duplicate_rate)
    sent = produce(a.bootstrap_servers, a.topic, spec, a.rate, per_transaction=a.per_transaction)
    print(f"sent {sent} messages ({spec.events} transactions) to {a.topic}")
    if a.expected:
        # Everything this seed produced so far, from event 0: earlier rounds included.
        expected = expected_aggregates([GeneratorSpec(a.seed, a.accounts, a.first + a.events, 0)])
        with open(a.expected, "w") as f:
            json.dump(expected, f, indent=1, sort_keys=True)
        print(f"expected aggregates of {len(expected)} accounts written to {a.expected}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
