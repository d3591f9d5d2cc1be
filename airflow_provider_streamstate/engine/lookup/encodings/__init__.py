"""Spark's encodings of state keys and values: types, UnsafeRow, the state schema files,
Murmur3 partitioning, RocksDB key prefixes, keys typed as text. Pure functions of bytes."""
