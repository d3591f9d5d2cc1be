"""What a store holds and how it is kept: finding snapshots, timelines, validation
records, retention, garbage collection and its lease, and verification.

May import: core, stores, checkpoint, kafka.
"""
