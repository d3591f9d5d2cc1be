"""Disaster recovery: failing a stream over to another region's store and Kafka
cluster, and the reports of what it found.

May import: core, stores, checkpoint, kafka, catalog, lifecycle.
"""
