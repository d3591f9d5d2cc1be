"""boto3 clients for the stack's S3 endpoints, for tests that look at objects directly.

Tests import helpers from here, never from conftest.py: pytest imports conftest.py as a
module of its own, and importing it again as `tests.conftest` would run its set-up twice
(a second Airflow home, so a DB migrated for one and a DAG run reading the other)."""

from __future__ import annotations

from typing import Any

from dev import stack as stack_mod


def s3_client(stack: stack_mod.Stack, region: str = "primary") -> Any:
    import boto3

    s3 = stack.s3[region]
    return boto3.client(
        "s3",
        endpoint_url=s3["endpoint_url"],
        region_name=s3["region"],
        aws_access_key_id=stack_mod.S3_ACCESS_KEY,
        aws_secret_access_key=stack_mod.S3_SECRET_KEY,
    )


def delete_newest_state(stack: stack_mod.Stack, checkpoint: str, region: str = "primary") -> list[str]:
    """Delete the state objects of the newest committed version of an `s3a://` checkpoint
    (as a wrong lifecycle rule would): its keys."""
    bucket, _, prefix = checkpoint.removeprefix("s3a://").partition("/")
    client = s3_client(stack, region)
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])]
    committed = max(int(k.rsplit("/", 1)[1]) for k in keys if f"{prefix}/commits/" in k and k[-1].isdigit())
    doomed = [k for k in keys if "/state/0/" in k and k.rsplit("/", 1)[1] in (f"{committed + 1}.delta",
                                                                             f"{committed + 1}.snapshot")]
    assert doomed, f"no state objects of version {committed + 1}"
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in doomed]})
    return doomed

