"""Kafka client settings from a properties file, for the CLI: what an Airflow Kafka
connection's extra gives the operators (security protocol, SASL, TLS files), in the
`client.properties` form Kafka tooling already uses. A file, not options: the password of
a SASL login must not appear in a command line (`ps`, shell history).

Names are librdkafka's (confluent-kafka), e.g. `security.protocol=SASL_SSL`,
`sasl.mechanism=SCRAM-SHA-512`, `sasl.username=...`, `sasl.password=...`,
`ssl.ca.location=/etc/kafka/ca.pem`. A name or value librdkafka does not accept is refused
when the file is read, by a client given no brokers (it connects nowhere); the message
leaves out the value, which may be a secret on the wrong line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError

# Set by the command line or by streamstate itself for what it reads and writes.
NOT_FROM_FILE = ("bootstrap.servers", "group.id", "enable.auto.commit", "auto.offset.reset", "isolation.level",
                 "enable.idempotence", "acks", "transactional.id")


def parse_client_properties(text: str, where: str) -> dict[str, str]:
    """`key=value` lines (`key: value` too); `#` and `!` start comments; no line continuations."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        eq, colon = line.find("="), line.find(":")
        cut = min(i for i in (eq, colon) if i >= 0) if max(eq, colon) >= 0 else -1
        key, value = (line[:cut].strip(), line[cut + 1:].strip()) if cut > 0 else ("", "")
        if not key:
            raise UsageError(f"{where} line {n} is not `name=value`", hint="write one librdkafka setting per line")
        if key in NOT_FROM_FILE:
            raise UsageError(f"{where} line {n} sets {key}, which streamstate sets itself",
                             hint="drop it (give the brokers with --kafka-bootstrap)")
        if key.endswith(".jaas.config"):
            raise UsageError(f"{where} line {n} sets {key}, a Java client setting",
                             hint="use librdkafka's sasl.mechanism, sasl.username and sasl.password")
        out[key] = value
    return out


def load_client_properties(path: str | Path) -> dict[str, Any]:
    """The settings in `path`, each checked by librdkafka itself (without connecting)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the Kafka client config {path}: {exc.strerror}",
                         hint="give a properties file of librdkafka settings (name=value per line)") from None
    config = parse_client_properties(text, f"Kafka client config {path}")
    try:  # no bootstrap servers: the client checks its settings and connects nowhere
        AdminClient({"log_level": 0, **config})
    except (KafkaException, ValueError, TypeError) as exc:
        message = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        message = re.sub(r'Invalid value "[^"]*"', "Invalid value", message)  # it may be a secret on the wrong line
        raise UsageError(f"Kafka client config {path}: {message}",
                         hint="use librdkafka's setting names and values (see its CONFIGURATION.md)") from None
    return config
