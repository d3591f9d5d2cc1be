"""Pipelines: streams linked by Kafka topics, snapshotted, restored and cloned as one
(a consistent cut across queries: docs/concepts.md, "Pipelines")."""
