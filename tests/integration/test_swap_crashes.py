"""Crashes in the middle of the swaps that change a checkpoint in place, on a local disk, on
S3 (the stack's s3proxy) and on HDFS (the stack's NameNode), and what every starter then does.

An in-place rescale (Spark 4.3's repartition, through `streamstate rescale`) and a rollback
restore are SIGKILLed halfway through moving their files in (engine/core/crash_points.py).
The checkpoint is fenced: a plain Spark query started on it (tests/apps/repartition_probe.py:
what a spark-submit of the user's own application does) fails at `start()` with the fence's
token in Spark's error, and the launcher refuses it in one line naming the way out. After
`streamstate stream recover` the same plain query continues exactly: the rescaled state on
its new partitions, or the rolled-back state, over the same input. On HDFS every crash point
of a swap is tried without Spark as well (local and S3: tests/unit/test_checkpoint_swap.py).

A rescale that finds the checkpoint changed under it refuses with nothing changed: a plain
query started while it ran, with input arriving (the rescale held before its swap), keeps
running and ends exactly, and `latest` still names the source; a snapshot the checkpoint has
moved past is refused as a source before anything is written. (The suite takes stopped
queries for stopped at once: tests/conftest.py; the race test opens the window again.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots, resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader, state_partitions
from airflow_provider_streamstate.engine.checkpoint.swap import FENCE_TOKEN, SWAP_FILE, recover_swap
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.spec import StreamSpec
from dev import spark_versions
from dev import stack as stack_mod
from tests.spark_probe import ProbeRun
from tests.unit.test_checkpoint_swap import POINTS, SWAP_SCRIPT

pytestmark = [pytest.mark.integration, pytest.mark.s3proxy, pytest.mark.hdfs]
CRASH = "swap.half-placed"
FILES = [[(f"k{i % 9}", i) for i in range(45)], [(f"k{3 + i % 11}", 100 + i) for i in range(33)],
         [(f"k{i % 5}", 1000 + i) for i in range(20)], [(f"k{20 + i % 4}", 5000 + i) for i in range(12)],
         [(f"k{i % 13}", 9000 + i) for i in range(26)]]


@dataclass
class Place:
    """Where the checkpoint lives, and what a process needs to reach it."""

    kind: str
    root: str  # a directory or URL below which the test's checkpoints go
    env: dict[str, str] = field(default_factory=dict)  # for the engine and Spark's Hadoop client
    conf: dict[str, str] = field(default_factory=dict)  # Spark confs (S3A)
    jars: list[str] = field(default_factory=list)

    def location(self, name: str) -> str:
        return f"{self.root}/{name}"


@pytest.fixture(scope="module")
def spark43() -> spark_versions.SparkVersion:
    return spark_versions.get("4.3").require()


@pytest.fixture(params=["local", "s3", "hdfs"])
def place(request: pytest.FixtureRequest, stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    tag = uuid.uuid4().hex[:10]
    if request.param == "local":
        found = Place("local", str(tmp_path / "ckpts"))
    elif request.param == "s3":
        # s3proxy: S3A's uploads of RocksDB's table files fail against moto's server (HTTP 100
        # taken for an answer), and the engine's S3 code meets a second implementation.
        request.getfixturevalue("s3proxy")
        region = stack_mod.S3PROXY
        found = Place("s3", f"s3a://{stack.s3[region]['bucket']}/swaps/{tag}", stack.s3_env(region),
                      stack.s3a_conf(region), sorted(str(p) for p in (stack_mod.JARS / "spark-s3a").glob("*.jar")))
    else:
        hdfs = request.getfixturevalue("hdfs")
        found = Place("hdfs", hdfs.url(f"/swaps/{tag}"), hdfs.env())
    for key, value in found.env.items():  # this process reaches the checkpoint as the others do
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    return found


def write_input(root: Path, n: int) -> None:
    """Input file `n` (1-based) of FILES, as the probe's file source reads it."""
    (root / "in").mkdir(parents=True, exist_ok=True)
    path = root / "in" / f"{n}.json"
    path.write_text("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in FILES[n - 1]))
    os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))


def expected(n: int) -> dict[str, list[int]]:
    """Count and sum per key of input files 1..n."""
    out: dict[str, list[int]] = {}
    for f in FILES[:n]:
        for k, v in f:
            c, s = out.get(k, [0, 0])
            out[k] = [c + 1, s + v]
    return out


def start_probe(line: spark_versions.SparkVersion, place: Place, *commands: list[str]) -> ProbeRun:
    """The probe's commands in the file's Spark process of `line` for `place`, read answer by
    answer (a test acts between them: the probe's `wait` holds it)."""
    env = line.env({**os.environ, **place.env, "PROBE_CONF": json.dumps(
        {**place.conf, **({"spark.jars": ",".join(place.jars)} if place.jars else {})})})
    return ProbeRun(line, *commands, env=env)


def spec_for(line: spark_versions.SparkVersion, place: Place, checkpoint: str, store: str) -> StreamSpec:
    return StreamSpec(name="probe", checkpoint=checkpoint, store=store, master="local[2]", jars=place.jars,
                      conf={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", **place.conf},
                      env={**line.env({"PATH": os.environ["PATH"]}), **place.env})


def cli(args: list[str], place: Place, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`streamstate ...` in a process of its own (one a crash point can kill)."""
    full = {**os.environ, **place.env, "STREAMSTATE_HOME": str(tmp_path / "home"), **env}
    return subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", *args], capture_output=True,
                          text=True, env=full, timeout=900)


def refused_by_every_starter(answer: dict[str, Any], checkpoint: str) -> None:
    """A plain Spark query was refused at start with the fence's word, and so is the launcher."""
    assert FENCE_TOKEN in answer.get("refused", ""), answer
    with pytest.raises(UnsupportedCheckpointError, match="in the middle of a swap") as refused:
        launcher.launch(["true"], stream="probe", checkpoint=checkpoint)
    assert f"streamstate stream recover --checkpoint {checkpoint}" in refused.value.one_line()


def partitions_of(checkpoint: str) -> int | None:
    reader = CheckpointReader(checkpoint)
    meta, _ = reader.offsets(reader.resolve_batch(None))
    return state_partitions({str(k): str(v) for k, v in (meta.get("conf") or {}).items()})


def test_an_in_place_rescale_and_a_rollback_killed_mid_swap_are_refused_by_every_starter_and_recovered_exactly(
    place, spark43, tmp_path, monkeypatch, capsys
) -> None:
    root, ckpt, store_url = tmp_path / "input", place.location("ckpt"), f"file://{tmp_path / 'store'}"
    for n in (1, 2):
        write_input(root, n)
    first = start_probe(spark43, place, ["run", ckpt, f"file://{root}", "rocksdb", "4"])
    assert first.answer()["batch"] == 0
    first.finish()
    store = open_store(store_url)
    before = create_snapshot(ckpt, store, "probe").manifest  # batch 0, 4 partitions: the rollback's target
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_for(spark43, place, ckpt, store_url).to_dict()))

    # The rescale dies halfway through moving the repartition batch in.
    crashed = cli(["rescale", "--spec", str(spec_file), "--partitions", "6", "--in-place"], place, tmp_path,
                  STREAMSTATE_CRASH_AT=CRASH, STREAMSTATE_UNMANAGED_WINDOW_S="0")
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert all(m.labels.get("rescaled-from") is None for m in list_snapshots(store, "probe").manifests)  # none yet
    probe = start_probe(spark43, place, ["run", ckpt, f"file://{root}", "rocksdb", "4"], ["wait", str(tmp_path / "go1")],
                  ["run", ckpt, f"file://{root}", "rocksdb", "4"], ["state", ckpt])
    refused_by_every_starter(probe.answer(), ckpt)
    assert main(["stream", "recover", "--checkpoint", ckpt, "--json"]) == 0
    assert "finished the rescale" in json.loads(capsys.readouterr().out)["actions"][0]
    write_input(root, 3)
    (tmp_path / "go1").touch()
    probe.answer()
    assert probe.answer()["batch"] == 2  # batch 1 was the repartition; 2 read file 3
    assert probe.answer() == expected(3)
    probe.finish()
    assert partitions_of(ckpt) == 6
    assert not open_checkpoint_fs(f"{ckpt}.streamstate-rescale-6").exists()  # recovery removed the work copy

    if place.kind == "local":
        return  # a local restore is one atomic exchange (its fallback: tests/unit/test_restore_swap.py)
    # The rollback to the 4-partition snapshot dies halfway through its swap.
    crashed = cli(["restore", "--store", store_url, "--stream", "probe", before.snapshot_id, "--target", ckpt,
                   "--force"], place, tmp_path, STREAMSTATE_CRASH_AT=CRASH, STREAMSTATE_UNMANAGED_WINDOW_S="0")
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    probe = start_probe(spark43, place, ["run", ckpt, f"file://{root}", "rocksdb", "4"], ["wait", str(tmp_path / "go2")],
                  ["run", ckpt, f"file://{root}", "rocksdb", "4"], ["state", ckpt])
    refused_by_every_starter(probe.answer(), ckpt)
    assert main(["stream", "recover", "--checkpoint", ckpt, "--json"]) == 0
    assert "finished the restore" in json.loads(capsys.readouterr().out)["actions"][0]
    (tmp_path / "go2").touch()
    probe.answer()
    assert probe.answer()["batch"] == 1  # from batch 0 again: file 3 read once more, on 4 partitions
    assert probe.answer() == expected(3)
    probe.finish()
    assert partitions_of(ckpt) == 4


def test_a_swap_on_hdfs_killed_at_any_point_leaves_the_old_checkpoint_a_fenced_one_or_the_new_one(
    hdfs, tmp_path, monkeypatch
) -> None:
    from tests.unit.test_checkpoint_swap import a_checkpoint_and_its_next_batch

    for key, value in hdfs.env().items():
        monkeypatch.setenv(key, value)
    local_ckpt, local_work, puts, expected_files = a_checkpoint_and_its_next_batch(tmp_path)
    base = hdfs.url(f"/swap-points/{uuid.uuid4().hex[:10]}")

    def upload(src: str, location: str) -> None:
        fs = open_checkpoint_fs(location)
        for p in sorted(Path(src).rglob("*")):
            if p.is_file():
                fs.write_record(p.relative_to(src).as_posix(), p.read_bytes())

    def tree(location: str) -> dict[str, str]:
        import hashlib

        fs = open_checkpoint_fs(location)
        return {rel: hashlib.sha256(fs.read_bytes(rel)).hexdigest() for rel in fs.files()
                if not rel.startswith("_streamstate/")}

    for point in POINTS:
        ckpt, work = f"{base}/{point}/ckpt", f"{base}/{point}/ckpt.streamstate-rescale-6"
        upload(local_ckpt, ckpt)
        upload(local_work, work)
        old = tree(ckpt)
        script = SWAP_SCRIPT.format(repo=str(Path(__file__).resolve().parents[2]),
                                    puts=[(p.rel, p.size, p.exclusive) for p in puts], ckpt=ckpt, work=work)
        env = {**os.environ, "STREAMSTATE_CRASH_AT": point}
        assert subprocess.run([sys.executable, "-c", script], env=env).returncode == -9, point
        fs = open_checkpoint_fs(ckpt)
        fenced = (fs.read_record("metadata") or b"").startswith(FENCE_TOKEN.encode())
        assert fenced or tree(ckpt) in (old, expected_files), point
        assert fenced == (fs.read_record(SWAP_FILE) is not None and point not in (
            "swap.prepared", "swap.recorded", "swap.unfenced")), point
        recover_swap(open_checkpoint_fs(ckpt))
        assert tree(ckpt) == (old if point in ("swap.prepared", "swap.recorded") else expected_files), point


@pytest.fixture
def held_rescale(tmp_path: Path) -> Iterator[Path]:
    """The file that lets a held rescale go on (`<file>.paused` appears when it is held)."""
    go = tmp_path / "rescale-go"
    yield go
    go.touch()  # never leave a held process behind


def test_a_rescale_refuses_a_checkpoint_a_plain_query_wrote_while_it_ran_and_the_query_ends_exactly(
    stack, spark43, tmp_path, held_rescale
) -> None:
    place = Place("local", str(tmp_path / "ckpts"))
    root, ckpt, store_url = tmp_path / "input", place.location("ckpt"), f"file://{tmp_path / 'store'}"
    for n in (1, 2):
        write_input(root, n)
    first = start_probe(spark43, place, ["run", ckpt, f"file://{root}", "rocksdb", "4"])
    assert first.answer()["batch"] == 0
    first.finish()
    then = time.time() - 600  # the stream stopped ten minutes ago
    for p in Path(ckpt).rglob("*"):
        os.utime(p, (then, then))
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_for(spark43, place, ckpt, store_url).to_dict()))
    rescale = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_streamstate.cli", "rescale", "--spec", str(spec_file), "--partitions",
         "6", "--in-place"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "STREAMSTATE_HOME": str(tmp_path / "home"), "STREAMSTATE_PAUSE_AT": "rescale.verified",
             "STREAMSTATE_PAUSE_FILE": str(held_rescale), "STREAMSTATE_UNMANAGED_WINDOW_S": "120"})
    deadline = time.monotonic() + 600
    while not Path(f"{held_rescale}.paused").exists():  # restored, repartitioned, verified: about to swap
        assert rescale.poll() is None and time.monotonic() < deadline, rescale.stderr.read() if rescale.stderr else ""
        time.sleep(0.5)

    # A plain spark-submit of the stream starts meanwhile, with input arriving.
    stop = tmp_path / "stop-follow"
    live = start_probe(spark43, place, ["follow", ckpt, f"file://{root}", "rocksdb", "4", str(stop)], ["state", ckpt])
    write_input(root, 3)
    committed = Path(ckpt) / "commits"
    while not (committed / "1").exists():
        assert live.running() and time.monotonic() < deadline, live.errors()
        time.sleep(0.5)
    write_input(root, 4)
    held_rescale.touch()
    out, err = rescale.communicate(timeout=600)
    assert rescale.returncode == 1, out + err
    line = err.strip()
    assert line.count("\n") == 0 and "rescal" in line and ("running" in line or "changed" in line), line
    assert not (Path(ckpt) / SWAP_FILE).exists() and not Path(f"{ckpt}.streamstate-rescale-6").exists()
    store = open_store(store_url)
    latest = resolve_snapshot(store, "probe", "latest")
    assert (latest.batch_id, latest.labels.get("rescaled-from")) == (0, None)  # the source, still

    write_input(root, 5)
    stop.touch()  # the live query reads what is left and stops: unharmed, exact
    live.answer()
    assert live.answer() == expected(5)
    live.finish()
    assert partitions_of(ckpt) == 4


def test_an_in_place_rescale_from_a_snapshot_the_checkpoint_moved_past_is_refused_before_anything_is_written(
    spark43, tmp_path, capsys
) -> None:
    place = Place("local", str(tmp_path / "ckpts"))
    root, ckpt, store_url = tmp_path / "input", place.location("ckpt"), f"file://{tmp_path / 'store'}"
    write_input(root, 1)
    probe = start_probe(spark43, place, ["run", ckpt, f"file://{root}", "rocksdb", "4"], ["wait", str(tmp_path / "go")],
                  ["run", ckpt, f"file://{root}", "rocksdb", "4"])
    probe.answer()
    old = create_snapshot(ckpt, open_store(store_url), "probe").manifest
    write_input(root, 2)
    (tmp_path / "go").touch()
    probe.answer()
    assert probe.answer()["batch"] == 1
    probe.finish()
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_for(spark43, place, ckpt, store_url).to_dict()))
    before = sorted(str(p.relative_to(ckpt)) for p in Path(ckpt).rglob("*"))
    code = main(["rescale", "--spec", str(spec_file), "--partitions", "6", "--in-place", "--snapshot",
                 old.snapshot_id])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.count("\n") == 0 and "would rewind it" in err, err
    assert sorted(str(p.relative_to(ckpt)) for p in Path(ckpt).rglob("*")) == before
    assert not Path(f"{ckpt}.streamstate-rescale-6").exists()
