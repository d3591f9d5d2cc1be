"""Sensors: wait for a stream to make progress or catch up with Kafka; fail fast when it cannot."""
