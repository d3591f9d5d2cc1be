"""Kafka: a topic's offsets on a broker, and the anchors (the identity of the last
record a batch consumed) that let a snapshot resume on another cluster.

May import: core.
"""
