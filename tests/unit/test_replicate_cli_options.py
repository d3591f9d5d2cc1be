"""A bad per-side option of `streamstate replicate` is named as that option, not as a
setting of the AWS environment the user never touched; nothing is copied."""

from __future__ import annotations

import pytest

from airflow_provider_streamstate.cli import main


@pytest.mark.parametrize(("option", "value", "says", "then"), [
    ("--from-endpoint-url", "127.0.0.1:9", "invalid S3 endpoint URL '127.0.0.1:9' given by --from-endpoint-url",
     "give --from-endpoint-url a full URL with its scheme"),
    ("--to-endpoint-url", "127.0.0.1:9", "given by --to-endpoint-url", "give --to-endpoint-url a full URL"),
    ("--from-profile", "nosuch", "AWS profile 'nosuch' given by --from-profile is not in",
     "fix --from-profile, or add the profile"),
    ("--to-profile", "nosuch", "given by --to-profile", "fix --to-profile"),
    ("--to-region", "not a region!", "invalid AWS region 'not a region!' given by --to-region",
     "give --to-region a region such as us-east-1"),
])
def test_a_bad_side_option_is_named_with_what_to_do(capsys, monkeypatch, tmp_path, option, value, says, then) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    code = main(["replicate", "--from", "s3://bucket-a/src", "--to", "s3://bucket-b/dst", "--stream", "s", "--all", option, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("streamstate: error: ") and says in err[0] and f"; {then}" in err[0], err[0]
    assert "AWS_PROFILE" not in err[0] and "AWS environment" not in err[0]
