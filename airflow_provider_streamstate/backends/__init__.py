"""The kinds of storage this package ships, one package per scheme: `local` (`file:` and
plain paths), `s3` (`s3://`, `s3a://`) and `hdfs` (`hdfs://`). Each holds its snapshot store,
its checkpoint filesystem and, in its `hook` module (the Airflow layer), how an Airflow
connection reaches it. The engine finds them by scheme through the `streamstate.backends`
entry point group and the Airflow layer through `streamstate.airflow_connections`, exactly as
it finds a backend of another distribution (docs/backends.md)."""
