"""The S3 backend: snapshot stores at `s3://bucket/prefix` and checkpoints at
`s3a://bucket/path` (or `s3://`) on S3 or any S3-compatible endpoint, reached through a
boto3 client (an Airflow `aws` connection's, see `hook`, else the AWS environment's)."""

from __future__ import annotations

from airflow_provider_streamstate.backends.s3.checkpoint import open_s3 as open_s3_checkpoint
from airflow_provider_streamstate.backends.s3.clients import reach_from_spark_conf, reach_of
from airflow_provider_streamstate.backends.s3.store import open_s3 as open_s3_store
from airflow_provider_streamstate.engine.stores.backends import Backend

BACKEND = Backend(
    name="s3",
    store_schemes=("s3",),
    checkpoint_schemes=("s3a", "s3"),
    open_store=open_s3_store,
    open_checkpoint=open_s3_checkpoint,
    reach=reach_of,
    reach_from_spark_conf=reach_from_spark_conf,
    store_example="s3://bucket/prefix",
    checkpoint_example="s3a://bucket/path",
)
