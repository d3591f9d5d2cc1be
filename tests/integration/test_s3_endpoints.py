"""Both S3 regions answer the amazon provider's S3Hook through Airflow connections."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("region", ["primary", "dr"])
def test_s3hook_put_and_get_through_an_airflow_connection(stack, region, monkeypatch) -> None:
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    conn_id = f"streamstate_s3_{region}"
    for key, value in stack.airflow_conn_env(region, conn_id).items():
        monkeypatch.setenv(key, value)
    hook = S3Hook(aws_conn_id=conn_id)
    bucket = stack.s3[region]["bucket"]
    hook.load_bytes(b"hello " + region.encode(), key=f"probe/{region}.txt", bucket_name=bucket, replace=True)
    assert hook.read_key(f"probe/{region}.txt", bucket_name=bucket) == f"hello {region}"
    assert hook.get_conn().meta.region_name == stack.s3[region]["region"]


def test_regions_are_independent_endpoints(stack) -> None:
    import boto3

    clients = {
        r: boto3.client("s3", endpoint_url=s["endpoint_url"], region_name=s["region"],
                        aws_access_key_id="k", aws_secret_access_key="s")
        for r, s in stack.s3.items()
    }
    clients["primary"].put_object(Bucket="streamstate", Key="only-in-primary", Body=b"x")
    assert clients["primary"].head_object(Bucket="streamstate", Key="only-in-primary")["ContentLength"] == 1
    dr_keys = clients["dr"].list_objects_v2(Bucket="streamstate", Prefix="only-in-primary").get("KeyCount", 0)
    assert dr_keys == 0
