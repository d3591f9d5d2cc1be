"""One key of a stream's state, in milliseconds and without Spark (no JVM, no pyspark).

`lookup_key` finds the partition Spark put a key in (`encodings.murmur3`, `layouts`), reads
only that partition's files from a checkpoint at a committed batch or from a snapshot in a
store (`reading.sources`), decodes them (`formats`: lz4/zstd framing, HDFS-backed files,
RocksDB tables and changelogs) into a bounded cache (`reading.cache`, `reading.partitions`: a
newer version of a cached partition costs only its newer files) and finds the key by the
bytes Spark's row writer gives it (`encodings`: UnsafeRow, RocksDB key prefixes, the schemas
the checkpoint recorded). `key_history` and `bisect_key` follow one key across snapshots
(`history`), reading each changed blob of its partition once; keys and conditions can be
given as text (`encodings.keytext`, `predicate`). `digest` sums a whole state's entries.

May import: core, stores, checkpoint, catalog.
"""

from airflow_provider_streamstate.engine.lookup.api import KeyLookup, lookup_key
from airflow_provider_streamstate.engine.lookup.encodings.keytext import parse_key_text
from airflow_provider_streamstate.engine.lookup.history import (
    KeyBisect,
    KeyHistory,
    KeyVersion,
    bisect_key,
    key_history,
)
from airflow_provider_streamstate.engine.lookup.layouts import SUPPORTED_OPERATORS, TIMERS
from airflow_provider_streamstate.engine.lookup.predicate import KeyPredicate, parse_predicate
from airflow_provider_streamstate.engine.lookup.reading.cache import DEFAULT_CACHE, PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.sources import (
    CheckpointSource,
    SnapshotSource,
    StateSource,
)

__all__ = ["DEFAULT_CACHE", "SUPPORTED_OPERATORS", "TIMERS", "CheckpointSource", "KeyBisect", "KeyHistory",
           "KeyLookup", "KeyPredicate", "KeyVersion", "PartitionCache", "SnapshotSource", "StateSource",
           "bisect_key", "key_history", "lookup_key", "parse_key_text", "parse_predicate"]
