"""Store URLs mean exactly one place: S3 prefixes with `.`, `..` or empty segments are
refused (S3 would keep them as part of the key: another prefix), trailing slashes are
dropped, file URLs are absolute (never resolved against the current directory), and a
custom S3 endpoint from either AWS_ENDPOINT_URL variable gets path-style addressing."""

from __future__ import annotations

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.backends.s3.clients import s3_client
from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.stores import open_store


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("s3://bucket/a//b", "empty segment"),
        ("s3://bucket//a", "empty segment"),
        ("s3://bucket/../x", "'..'"),
        ("s3://bucket/./x", "'.'"),
        ("s3://bucket/a/../b", "'..'"),
        ("s3://bucket/a/.", "'.'"),
        ("s3://bucket/a\\b", "backslash"),
        ("s3://bucket/a\nb", "control character"),
        ("s3://Bucket/x", "not a bucket name"),
        ("s3://b/x", "not a bucket name"),
        ("s3:///x", "not a bucket name"),
    ],
)
def test_s3_urls_that_would_name_another_prefix_are_refused(url, why) -> None:
    with pytest.raises(UsageError, match=why) as err:
        open_store(url, connection=object())
    assert err.value.hint
    assert "\n" not in err.value.one_line().replace(url, "")


def test_an_empty_segment_refusal_suggests_the_url_without_it() -> None:
    with pytest.raises(UsageError) as err:
        open_store("s3://bucket/a//b/", connection=object())
    assert err.value.hint == "write it as s3://bucket/a/b"


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "canonical"),
    [
        ("s3://bucket/p/", "bucket", "p", "s3://bucket/p"),
        ("s3://bucket/a/b//", "bucket", "a/b", "s3://bucket/a/b"),
        ("s3://bucket/", "bucket", "", "s3://bucket"),
        ("s3://bucket", "bucket", "", "s3://bucket"),
        ("s3://my.bucket-1/a.b/c..d/e", "my.bucket-1", "a.b/c..d/e", "s3://my.bucket-1/a.b/c..d/e"),
    ],
)
def test_s3_urls_with_trailing_slashes_are_normalised(url, bucket, prefix, canonical) -> None:
    store = open_store(url, connection=object())
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.url) == (bucket, prefix, canonical)


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}", "file://localhost{p}", "{p}"])
def test_absolute_file_urls_in_every_spelling_open_that_directory(tmp_path, form) -> None:
    store = open_store(form.format(p=tmp_path / "store"))
    assert isinstance(store, LocalStore)
    assert store.root == tmp_path / "store"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("file:relative/store", "relative"),
        ("file:./store", "relative"),
        ("file:", "relative"),
        ("file://tmp/store", "host name"),
        ("relative/store", "unsupported"),
    ],
)
def test_relative_file_urls_are_refused_not_resolved_under_the_cwd(tmp_path, monkeypatch, url, why) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=why) as err:
        open_store(url)
    assert "file:///" in (err.value.hint or "") or "abs" in (err.value.hint or "")
    assert list(tmp_path.iterdir()) == []


def test_an_aws_connection_with_a_file_store_is_refused(tmp_path) -> None:
    with pytest.raises(UsageError, match="does not apply to"):
        open_store(str(tmp_path), conn_id="aws_default")


@pytest.fixture
def aws_env(monkeypatch, tmp_path):  # noqa: ANN201
    """A clean AWS environment with dummy credentials: no profile, no endpoint, no network."""
    import os

    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


@pytest.mark.parametrize(
    ("env", "path_style", "endpoint"),
    [
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, True, "http://127.0.0.1:9"),
        ({"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"}, True, "http://127.0.0.1:9"),
        ({"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}, False, None),
        ({}, False, None),
    ],
    ids=["endpoint-url", "endpoint-url-s3", "ignored", "aws"],
)
def test_a_custom_endpoint_from_either_variable_gets_path_style_addressing(aws_env, env, path_style, endpoint) -> None:
    for key, value in env.items():
        aws_env.setenv(key, value)
    client = s3_client()
    assert ((client.meta.config.s3 or {}).get("addressing_style") == "path") is path_style
    if endpoint:
        assert client.meta.endpoint_url == endpoint
