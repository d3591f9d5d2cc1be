"""One key of a stream's state, in milliseconds and without Spark (no JVM, no pyspark).

`lookup_key` finds the partition Spark put a key in (`murmur3`, `layouts`), reads only
that partition's files from a checkpoint at a committed batch or from a snapshot in a store
(`sources`), decodes them (`codec`, `hdfs_state`, `rocksdb_sst`, `rocksdb_state`) into a
bounded cache (`cache`) and finds the key by the bytes Spark's row writer gives it
(`unsafe_row`, `rocksdb_keys`), with the schemas the checkpoint recorded (`schema`, `types`).

May import: core, stores, checkpoint, catalog.
"""

from airflow_provider_streamstate.engine.lookup.api import KeyLookup, lookup_key
from airflow_provider_streamstate.engine.lookup.cache import DEFAULT_CACHE, PartitionCache
from airflow_provider_streamstate.engine.lookup.sources import CheckpointSource, SnapshotSource, StateSource

__all__ = ["DEFAULT_CACHE", "CheckpointSource", "KeyLookup", "PartitionCache", "SnapshotSource", "StateSource",
           "lookup_key"]
