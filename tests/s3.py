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
