"""A Spark checkpoint as we read it: the reader that plans a consistent cut, the
filesystems a checkpoint lives on (a local directory or an S3 prefix), copying its files
into a store, and our records beside it (the sidecar, and whether a stream is running on it).

May import: core, stores.
"""
