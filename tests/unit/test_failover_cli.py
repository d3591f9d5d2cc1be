"""`streamstate failover` refuses bad input in one line and writes nothing."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from airflow_provider_streamstate.cli import main


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_non_empty_target_is_refused_before_anything_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "dr-ck"
    target.mkdir()
    (target / "keep").write_text("x")
    code = main(["failover", "--store", str(tmp_path / "store"), "--stream", "s", "--target", str(target),
                 "--kafka-bootstrap", "127.0.0.1:1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1
    assert "is not empty" in err[0]
    assert sorted(p.name for p in target.iterdir()) == ["keep"]


def test_an_unreachable_dr_cluster_is_one_line_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "dr-ck"
    code = main(["failover", "--store", str(tmp_path / "store"), "--stream", "s", "--target", str(target),
                 "--kafka-bootstrap", f"127.0.0.1:{closed_port()}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1
    assert "cannot reach the DR Kafka cluster" in err[0]
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []
