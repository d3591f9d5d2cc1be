"""Operations that make and move snapshots: snapshot, restore (local and S3 targets),
replicate, and the re-check of refreshed blobs they share.

May import: core, stores, checkpoint, kafka, catalog.
"""
