"""The state store's file formats: lz4/zstd framing, HDFS-backed snapshots and deltas,
RocksDB tables, checkpoint zips and changelogs. Bytes in, entries out."""
