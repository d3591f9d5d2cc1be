"""Ctrl-C during a large S3 snapshot stops it within seconds: the CLI exits 130 with its
"nothing was published" line, no manifest appears, and every multipart upload that was
in flight is aborted, not left behind to be billed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.s3.store import S3Store
from tests.s3 import s3_client
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs

pytestmark = pytest.mark.integration
STREAMSTATE = str(Path(sys.executable).parent / "streamstate")
FILE_MB = 20  # above the multipart threshold (16 MiB): every file goes up in parts


def _big_checkpoint(root: Path) -> Path:
    """A synthetic checkpoint of 12 random 20 MiB state files (240 MiB, nothing deduplicates)."""
    make_checkpoint(root, batches=3, partitions=4)
    for d in store_dirs(root):
        for v in range(1, 4):
            with open(d / f"{v}.delta", "wb") as f:
                for _ in range(FILE_MB // 4):
                    f.write(os.urandom(4 << 20))
    return root


def _uploads(client, bucket: str, prefix: str) -> list[dict]:  # noqa: ANN001
    return client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])


def test_ctrl_c_during_a_large_s3_snapshot_exits_promptly_and_leaves_nothing(stack, tmp_path) -> None:
    ckpt = _big_checkpoint(tmp_path / "ckpt")
    bucket, prefix = stack.s3["primary"]["bucket"], f"tests/cancel-{uuid.uuid4().hex[:10]}"
    url = f"s3://{bucket}/{prefix}"
    client = s3_client(stack)
    env = {**os.environ, **stack.s3_env("primary")}
    proc = subprocess.Popen(
        [STREAMSTATE, "snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "big",
         "--parallelism", "4"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _uploads(client, bucket, prefix):  # interrupt while parts are going up
            assert proc.poll() is None, f"the snapshot ended before any multipart upload: {proc.communicate()}"
            assert time.monotonic() < deadline, "no multipart upload started within 120 s"
            time.sleep(0.02)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"stopped {elapsed:.2f} s after SIGINT")
    assert proc.returncode == 130, err
    assert elapsed < 5.0, f"took {elapsed:.1f} s to stop"
    assert err.strip().splitlines()[-1] == "streamstate: interrupted; nothing was published", err
    assert "Traceback" not in err

    assert _uploads(client, bucket, prefix) == []  # in-flight multipart uploads were aborted
    assert S3Store(client, bucket, prefix).list_snapshot_ids("big") == []
    listed = subprocess.run(
        [STREAMSTATE, "snapshot", "list", "--store", url, "--stream", "big", "--json"],
        env=env, capture_output=True, text=True,
    )
    if listed.returncode == 0:
        assert json.loads(listed.stdout) == []
    else:
        assert "no snapshots" in listed.stderr, listed.stderr
