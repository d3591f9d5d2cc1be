"""The CLI as a newcomer meets it: a typo or an empty store is never a silent success, a
repeated snapshot is not a duplicate, errors are one line ending with what to do, and
the rollback check "are the snapshot's offsets still in Kafka?" is one command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

pytestmark = pytest.mark.integration
STREAMSTATE = str(Path(sys.executable).parent / "streamstate")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STREAMSTATE, *args], capture_output=True, text=True, env=os.environ.copy())


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamstate: error: "), proc.stderr
    assert "unexpected" not in lines[0] and "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def store_with_payments(tmp_path: Path) -> tuple[str, Path]:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=3)
    for d in store_dirs(ckpt):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v}")
    url = f"file://{tmp_path / 'store'}"
    for stream in ("payments", "orders"):
        assert cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", stream).returncode == 0
    return url, ckpt


def test_a_mistyped_stream_is_an_error_naming_the_streams_there(store_with_payments) -> None:
    url, _ = store_with_payments
    for args in (
        ["snapshot", "list", "--store", url, "--stream", "paymnets"],
        ["snapshot", "show", "--store", url, "--stream", "paymnets", "latest"],
        ["verify", "--store", url, "--stream", "paymnets"],
        ["restore", "--store", url, "--stream", "paymnets", "latest", "--target", "/tmp/never-written"],
    ):
        proc = cli(*args)
        assert proc.returncode == 1, args
        line = one_error_line(proc)
        assert "paymnets has no snapshots" in line and "streams there: payments, orders" in line
    assert not Path("/tmp/never-written").exists()


def test_verify_of_an_empty_store_fails_instead_of_passing_on_nothing(tmp_path) -> None:
    proc = cli("verify", "--store", f"file://{tmp_path / 'empty'}", "--stream", "payments")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "holds no snapshots of any stream" in one_error_line(proc)


def test_streams_lists_each_stream_with_its_snapshots(store_with_payments) -> None:
    url, _ = store_with_payments
    rows = json.loads(cli("streams", "--store", url, "--json").stdout)
    assert [(r["stream"], r["snapshots"], r["current_timeline"]) for r in rows] == [("orders", 1, 1), ("payments", 1, 1)]
    assert all(r["bytes"] > 0 and r["newest"] for r in rows)
    assert "payments" in cli("streams", "--store", url).stdout


def test_snapshotting_the_same_batch_again_returns_the_existing_snapshot(store_with_payments) -> None:
    url, ckpt = store_with_payments
    again = cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "payments")
    assert again.returncode == 0 and "already holds batch 2" in again.stdout
    rows = json.loads(cli("snapshot", "list", "--store", url, "--stream", "payments", "--json").stdout)
    assert len(rows) == 1 and rows[0]["timeline"] == 1 and rows[0]["on_current_timeline"]
    forced = cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "payments", "--always")
    assert forced.returncode == 0
    assert len(json.loads(cli("snapshot", "list", "--store", url, "--stream", "payments", "--json").stdout)) == 2


def test_a_clone_prints_its_new_query_id_and_latest_works_everywhere(store_with_payments, tmp_path) -> None:
    url, _ = store_with_payments
    shown = json.loads(cli("snapshot", "show", "--store", url, "--stream", "payments", "latest", "--json").stdout)
    proc = cli("restore", "--store", url, "--stream", "payments", "latest", "--target", str(tmp_path / "clone"),
               "--new-query-id")
    assert proc.returncode == 0
    query_id = json.loads((tmp_path / "clone" / "metadata").read_text())["id"]
    assert f"new query id {query_id}" in proc.stdout and query_id != shown["query_id"]
    assert cli("verify", "--store", url, "--stream", "payments", "latest").returncode == 0


def test_errors_end_with_what_to_do(store_with_payments, tmp_path) -> None:
    url, _ = store_with_payments
    a_file = tmp_path / "file"
    a_file.write_text("x")
    line = one_error_line(cli("restore", "--store", url, "--stream", "payments", "latest", "--target", str(a_file)))
    assert "is not a directory; give the path of a directory" in line
    line = one_error_line(cli("snapshot", "show", "--store", url, "--stream", "payments", "not-an-id"))
    assert "give a snapshot id, `latest` or `latest-good:<suite>`" in line


def _damaged_checkpoint(tmp_path: Path, what: str) -> Path:
    ckpt = make_checkpoint(tmp_path / what, batches=2)
    for d in store_dirs(ckpt):
        write(d / "1.delta", "a")
        write(d / "2.delta", "b")
    if what == "metadata":
        write(ckpt / "metadata", "{not json")
    else:
        write(ckpt / "offsets/1", "v1\n")
    return ckpt


@pytest.mark.parametrize(("case", "says", "then"), [
    ("store is a file", "exists and is not a directory", "give --store a directory"),
    ("negative batch", "batch id must be >= 0, got -1", "give a committed batch id"),
    ("unreadable metadata", "metadata is unreadable", "check that --checkpoint is the query's checkpoint"),
    ("empty offsets", "offsets/1 of", "snapshot an earlier batch with --batch"),
])
def test_checkpoint_and_store_mistakes_are_one_line_ending_with_what_to_do(tmp_path, case, says, then) -> None:
    store = str(tmp_path / "store")
    ckpt = _damaged_checkpoint(tmp_path, "offsets" if case == "empty offsets" else
                               "metadata" if case == "unreadable metadata" else "fine")
    args = ["snapshot", "create", "--checkpoint", str(ckpt), "--store", store, "--stream", "s"]
    if case == "store is a file":
        Path(store).write_text("x")
    if case == "negative batch":
        args += ["--batch", "-1"]
    proc = cli(*args)
    line = one_error_line(proc)
    assert proc.returncode in (1, 2) and says in line, line
    assert line.index(says) < line.index(f"; {then}"), line


def test_a_damaged_manifest_is_named_with_what_to_do_and_latest_says_none_is_readable(store_with_payments) -> None:
    url, _ = store_with_payments
    root = Path(url.removeprefix("file://"))
    [manifest] = (root / "streams" / "payments" / "snapshots").iterdir()
    manifest.write_text("{not json")
    line = one_error_line(cli("snapshot", "list", "--store", url, "--stream", "payments"))
    assert f"snapshot {manifest.stem} of payments" in line and "is not valid JSON" in line
    assert "replicate it again from a store that holds it intact" in line
    proc = cli("snapshot", "show", "--store", url, "--stream", "payments", "latest")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("streamstate: warning: skipped an unreadable manifest: snapshot"), proc.stderr
    assert lines[1] == (f"streamstate: error: stream payments has no readable snapshot on its current timeline in {url}; "
                        "`streamstate verify` names the damaged manifests; name an older snapshot by id")


def test_output_cut_short_by_a_closed_pipe_is_not_an_error_message(store_with_payments) -> None:
    url, _ = store_with_payments
    proc = subprocess.run(f"{STREAMSTATE} snapshot show --store {url} --stream orders latest --files | head -c 10",
                          shell=True, capture_output=True, text=True)
    assert len(proc.stdout) == 10 and "unexpected" not in proc.stderr and "Traceback" not in proc.stderr


def test_verbose_shows_what_the_engine_did(store_with_payments, tmp_path) -> None:
    url, ckpt = store_with_payments
    proc = cli("--verbose", "snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "v")
    assert proc.returncode == 0
    assert "streamstate.snapshot" in proc.stderr and "cut at batch 2" in proc.stderr and "published" in proc.stderr


def test_show_puts_the_brokers_offsets_next_to_the_snapshots(stack, topic, tmp_path) -> None:
    """The rollback runbook's check: are the records from the snapshot's offsets on still there?"""
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=5, accounts=5, events=90))
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    for d in store_dirs(ckpt):
        write(d / "1.delta", "delta")
    meta = json.loads((ckpt / "offsets/0").read_text().split("\n")[1])
    write(ckpt / "offsets/0", f"v1\n{json.dumps(meta)}\n" + json.dumps({topic: {"0": 10, "1": 0, "2": 5}}))
    url = f"file://{tmp_path / 'store'}"
    assert cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "k").returncode == 0
    proc = cli("snapshot", "show", "--store", url, "--stream", "k", "latest", "--kafka-bootstrap", stack.kafka_bootstrap,
               "--json")
    parts = {p["partition"]: p for p in json.loads(proc.stdout)["broker_offsets"]}
    assert sum(p["latest"] for p in parts.values()) == 90
    assert all(p["earliest"] == 0 and p["available"] for p in parts.values())
    assert parts[0]["behind"] == parts[0]["latest"] - 10
    text = cli("snapshot", "show", "--store", url, "--stream", "k", "latest", "--kafka-bootstrap", stack.kafka_bootstrap)
    assert f"{topic}[0]: 10 / 0..{parts[0]['latest']}" in text.stdout

    # Retention deleted the records partition 0 resumes from: the rollback would lose them.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        fut.result(timeout=30)
    gone = {p["partition"]: p for p in json.loads(cli(
        "snapshot", "show", "--store", url, "--stream", "k", "latest", "--kafka-bootstrap", stack.kafka_bootstrap,
        "--json").stdout)["broker_offsets"]}
    assert (gone[0]["earliest"], gone[0]["available"]) == (20, False)
    assert gone[1]["available"] and gone[2]["available"]
    text = cli("snapshot", "show", "--store", url, "--stream", "k", "latest", "--kafka-bootstrap", stack.kafka_bootstrap)
    assert f"{topic}[0]: 10 / 20..{parts[0]['latest']}" in text.stdout and "GONE" in text.stdout
    down = cli("snapshot", "show", "--store", url, "--stream", "k", "latest", "--kafka-bootstrap", "127.0.0.1:9")
    assert down.returncode == 1 and "cannot reach Kafka" in one_error_line(down)


def test_a_kafka_client_config_file_reaches_the_clients_and_a_bad_one_is_refused_in_one_line(
    stack, topic, tmp_path
) -> None:
    """`--kafka-config FILE`: what an Airflow Kafka connection gives the operators (SASL, TLS)."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    for d in store_dirs(ckpt):
        write(d / "1.delta", "delta")
    meta = json.loads((ckpt / "offsets/0").read_text().split("\n")[1])
    write(ckpt / "offsets/0", f"v1\n{json.dumps(meta)}\n" + json.dumps({topic: {"0": 0}}))
    url = f"file://{tmp_path / 'store'}"
    assert cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "k").returncode == 0
    show = ["snapshot", "show", "--store", url, "--stream", "k", "latest", "--kafka-bootstrap", stack.kafka_bootstrap]
    config = tmp_path / "client.properties"
    config.write_text("# a comment\nclient.id = streamstate-cli\n! another\nsocket.keepalive.enable=true\n")
    assert cli(*show, "--kafka-config", str(config), "--json").returncode == 0
    # Applied, not only read: SASL against the plaintext listener cannot connect.
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=s3cret\n")
    sasl = cli(*show, "--kafka-config", str(config))
    assert sasl.returncode == 1 and "cannot reach Kafka" in one_error_line(sasl) and "s3cret" not in sasl.stderr
    for text, said in (("sasl.mechanismz=PLAIN\n", 'No such configuration property: "sasl.mechanismz"'),
                       ("sasl.jaas.config=org.apache...;\n", "a Java client setting"),
                       ("bootstrap.servers=elsewhere:9092\n", "which streamstate sets itself"),
                       ("just words\n", "line 1 is not `name=value`")):
        config.write_text(text)
        bad = cli(*show, "--kafka-config", str(config))
        assert bad.returncode == 2 and said in one_error_line(bad) and str(config) in bad.stderr, bad.stderr
    alone = cli("snapshot", "show", "--store", url, "--stream", "k", "latest", "--kafka-config", str(config))
    assert alone.returncode == 2 and "--kafka-config needs --kafka-bootstrap" in one_error_line(alone)
