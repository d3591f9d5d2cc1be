"""Checkpoint locations the CLI cannot use, as a newcomer writes them: an `s3a://` checkpoint
without credentials, a bucket that does not exist, a scheme we do not read (`gs://`,
`hdfs://`). Each is one error line naming what to fix, a non-zero exit, and nothing written:
no snapshot in the store, no object at the restore target."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.s3 import s3_client
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

pytestmark = pytest.mark.integration
STREAMSTATE = str(Path(sys.executable).parent / "streamstate")


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STREAMSTATE, *args], capture_output=True, text=True, env=env, timeout=120)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamstate: error: "), proc.stderr
    assert "unexpected" not in lines[0] and "Traceback" not in proc.stderr
    return lines[0]


def test_unusable_checkpoint_locations_are_one_line_each_and_write_nothing(stack, tmp_path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW_CONN_"))}
    (tmp_path / "home").mkdir()
    base.update(HOME=str(tmp_path / "home"), AWS_EC2_METADATA_DISABLED="true")
    with_creds = {**base, **stack.s3_env("primary")}
    no_creds = {**base, "AWS_ENDPOINT_URL": stack.s3["primary"]["endpoint_url"],
                "AWS_DEFAULT_REGION": stack.s3["primary"]["region"]}
    bucket = stack.s3["primary"]["bucket"]
    prefix = f"tests/mistakes-{uuid.uuid4().hex[:10]}"
    store = f"file://{tmp_path / 'store'}"

    # A real snapshot to restore from (local checkpoint, local store).
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=2)
    for d in store_dirs(ckpt):
        for v in range(1, 3):
            write(d / f"{v}.delta", f"delta {v}")
    made = cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", store, "--stream", "s", env=base)
    assert made.returncode == 0, made.stderr
    listed = cli("snapshot", "list", "--store", store, "--stream", "s", "--json", env=base)
    before = listed.stdout

    cases = [
        # (what, env, location, words the line must have)
        ("no credentials", no_creds, f"s3a://{bucket}/{prefix}/ckpt", ["no AWS credentials", "AWS_ACCESS_KEY_ID"]),
        ("no such bucket", with_creds, f"s3a://no-such-bucket-{uuid.uuid4().hex[:8]}/ckpt",
         ["does not exist", "checkpoint location"]),
        ("gs", with_creds, "gs://bucket/ckpt", ["gs:// scheme is not supported", "s3a://"]),
        ("unreachable HDFS", with_creds, "hdfs://no-such-namenode.invalid:8020/ckpt",
         ["no HDFS NameNode answered", "HADOOP_CONF_DIR"]),
    ]
    for what, env, location, words in cases:
        snap = one_error_line(cli("snapshot", "create", "--checkpoint", location, "--store", store,
                                  "--stream", "s", "--always", env=env))
        assert all(w in snap for w in words), (what, snap)
        restored = one_error_line(cli("restore", "--store", store, "--stream", "s", "--target", location,
                                      "latest", env=env))
        assert all(w in restored for w in words), (what, restored)

    # Nothing written: the store holds the one snapshot it had; the S3 target has no object.
    assert cli("snapshot", "list", "--store", store, "--stream", "s", "--json", env=base).stdout == before
    assert s3_client(stack).list_objects_v2(Bucket=bucket, Prefix=prefix).get("KeyCount", 0) == 0
