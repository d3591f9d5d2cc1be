"""A repair edit on real Spark streams (engine/edit/): a counting stream (count and sum per
key of JSON files, tests/apps/repartition_probe.py, in a Spark line's own Python) with
HDFS-backed and RocksDB state is fed planted bad input (a bogus key, a bogus record for a
real key); the stopped stream is repaired in place without Spark writing a byte (the bogus
key deleted, the real key set back to its value without the bad record), Spark's state
reader in the stream's own Spark checks the edited copy before it is swapped in, and the
stream resumes from the edit batch: after more input its state equals that of a run that
never saw the bad input, on every line with a state reader (4.0+)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.manifests import get_snapshot
from airflow_provider_streamstate.engine.checkpoint.liveness import ENV_UNMANAGED_WINDOW
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.edit.changes import EditSpec
from airflow_provider_streamstate.engine.edit.repair import edit_stream
from airflow_provider_streamstate.engine.edit.spark_check import SPARK_KEYS, edit_check_application
from airflow_provider_streamstate.engine.lookup import lookup_key
from dev import spark_versions
from tests.spark_probe import probe

pytestmark = [pytest.mark.integration, pytest.mark.spark_lines]

GOOD = [{"k": k, "v": v} for k, v in [("a", 1), ("b", 2), ("c", 3), ("a", 4), ("d", 5), ("e", 6), ("b", 7)]]
BAD = [{"k": "a", "v": 1_000_000}, {"k": "bot", "v": 9}, {"k": "bot", "v": 9}]
MORE = [{"k": k, "v": v} for k, v in [("a", 10), ("bot", 1), ("c", 30), ("f", 60)]]


def feed(root: Path, name: str, records: list[dict[str, Any]]) -> None:
    (root / "in").mkdir(parents=True, exist_ok=True)
    (root / "in" / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in records))


def check_command(version: spark_versions.SparkVersion) -> Any:
    """How an edit submits Spark's check in `version`'s Spark (as a stream spec's Spark would)."""
    def command(args: Any) -> tuple[list[str], dict[str, str]]:
        return version.submit_command(edit_check_application(), list(args)), version.env()

    return command


FORMAT_2 = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}


# 4.1 with HDFS-backed state: tests/integration/test_repair_dag.py repairs a launched stream
# in place through the repair DAG and checks it ends exact. Each line's stores run side by
# side in one Spark process per step (a JVM start is the dearest part of each).
@pytest.mark.parametrize(("line", "stores"), [
    # format 2 first: the plain store's queries after it would show a leak of its confs
    pytest.param("4.1", (("rocksdb-format-2", "rocksdb", FORMAT_2), ("rocksdb", "rocksdb", {})),
                 id="4.1-format-2-and-rocksdb"),
    pytest.param("4.3", (("hdfs", "hdfs", {}), ("rocksdb", "rocksdb", {})), id="4.3-hdfs-and-rocksdb"),
    pytest.param("4.0", (("hdfs", "hdfs", {}),), id="4.0-hdfs"),
])
def test_a_stream_repaired_in_place_resumes_and_ends_as_if_it_never_saw_the_bad_input(
        line: str, stores: tuple[tuple[str, str, dict[str, str]], ...], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    version = spark_versions.get(line)
    if not version.installed():
        pytest.skip(f"Spark {line} is not installed here: run `make setup`")
    monkeypatch.setenv(ENV_UNMANAGED_WINDOW, "0")  # the probe's query has ended: nothing runs on the checkpoint
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    runs = {}  # store -> (checkpoint, its input, the reference run's checkpoint, its input, provider, confs)
    for name, provider, conf in stores:
        ckpt, root, ref, ref_root = (str(tmp_path / name / "ckpt"), tmp_path / name / "root",
                                     str(tmp_path / name / "ref"), tmp_path / name / "ref-root")
        feed(root, "0-good", GOOD)
        feed(root, "1-bad", BAD)
        feed(ref_root, "0-good", GOOD)
        feed(ref_root, "2-more", MORE)
        runs[name] = (ckpt, root, ref, ref_root, provider, json.dumps(conf))
    probe(version, *(step for ckpt, root, ref, ref_root, provider, conf in runs.values() for step in (
        ["run", ckpt, str(root), provider, "4", conf], ["run", ref, str(ref_root), provider, "4", conf])))
    for name, (ckpt, *_, conf) in runs.items():  # each query ran with its own confs (format 2: a v2 commit log)
        assert (Path(ckpt) / "commits" / "0").read_text().split("\n", 1)[0] == \
            ("v2" if "checkpointFormatVersion" in conf else "v1"), name

    a = [r["v"] for r in GOOD if r["k"] == "a"]
    edit = EditSpec.from_json({"delete": ["bot"], "set": [{"key": "a", "value": [len(a), sum(a)]}]},
                              "planted bad records of a and bot")
    edited = {}
    for name, (ckpt, *_) in runs.items():
        n = CheckpointReader(ckpt).resolve_batch(None)
        store = LocalStore(tmp_path / name / "snapshots", fsync=False)
        dry = edit_stream(store, "counts", ckpt, edit)
        assert dry.dry_run and dry.preview.changed == 2 and CheckpointReader(ckpt).resolve_batch(None) == n

        result = edit_stream(store, "counts", ckpt, edit, apply=True, command=check_command(version),
                             requested_by="test")
        assert result.edit_batch == n + 1 and CheckpointReader(ckpt).resolve_batch(None) == n + 1, name
        assert result.spark is not None and result.spark["spark_version"] == version.pyspark
        assert result.spark["keys_checked"] == 2 and result.spark["entries"] == {"0/default": 5}, name
        labels = get_snapshot(store, "counts", result.edited_snapshot).labels
        assert labels["edited-from"] == result.source_snapshot and labels["edit"] == "planted bad records of a and bot"
        edited[name] = n + 1

    for _, root, *_ in runs.values():
        feed(root, "2-more", MORE)
    answers = probe(version, *(["run", ckpt, str(root), provider, "4", conf]
                               for ckpt, root, _, _, provider, conf in runs.values()),
                    *(step for ckpt, _, ref, _, _, conf in runs.values()
                      for step in (["state", ckpt, conf], ["state", ref, conf])))
    states = answers[len(runs):]
    for i, (name, (ckpt, *_)) in enumerate(runs.items()):
        repaired, reference = states[2 * i], states[2 * i + 1]
        assert repaired == reference, name
        assert reference["a"] == [3, 15] and reference["bot"] == [1, 1] and len(reference) == 7, name
        assert CheckpointReader(ckpt).resolve_batch(None) == edited[name] + 1, name  # the input after the edit ran once


def batch_output(root: Path, batch: int) -> list[dict[str, Any]]:
    """What the deduplicating probe wrote for one batch (tests/apps/repartition_probe.py)."""
    return sorted((json.loads(ln) for f in (root / "out" / str(batch)).glob("part-*.json")
                   for ln in f.read_text().splitlines() if ln), key=lambda r: r["k"])


def test_a_deduplication_repaired_in_place_lets_the_key_a_bad_record_took_through_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dropDuplicates with RocksDB and HDFS-backed state: a bogus record took key `x`, so the
    real `x` would be dropped as a duplicate forever. The key deleted from the stopped
    stream's state (Spark's check in the stream's Spark), the stream resumes: the real `x` is
    let through once, a real duplicate still is not, and the state and the output of the
    resumed batch are those of a run that never saw the bogus record."""
    version = spark_versions.get("4.1")
    monkeypatch.setenv(ENV_UNMANAGED_WINDOW, "0")
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    good = [{"k": k, "v": v} for k, v in [("a", 1), ("b", 2), ("a", 3), ("c", 4)]]
    more = [{"k": "x", "v": 42}, {"k": "a", "v": 99}, {"k": "d", "v": 5}]
    runs = {}
    for provider in ("rocksdb", "hdfs"):
        for name, bad in (("ckpt", [{"k": "x", "v": -1}]), ("ref", [])):
            root = tmp_path / f"{name}-{provider}"
            feed(root, "0-good", good)
            if bad:
                feed(root, "1-bad", bad)
            runs[name, provider] = (str(tmp_path / f"{name}-{provider}-ckpt"), root)
    probe(version, *(["run", ckpt, str(root), p, "4", "dedup"] for (_, p), (ckpt, root) in runs.items()))

    command = check_command(version)
    edited = {}
    for provider in ("rocksdb", "hdfs"):
        ckpt, root = runs["ckpt", provider]
        n = CheckpointReader(ckpt).resolve_batch(None)
        edit = EditSpec.from_json({"delete": ["x"]}, "the bogus x")
        store = LocalStore(tmp_path / f"snapshots-{provider}", fsync=False)
        result = edit_stream(store, "dedup", ckpt, edit, apply=True, command=command, requested_by="test")
        assert result.edit_batch == n + 1 and result.preview.changed == 1
        assert result.spark is not None and result.spark["keys_checked"] == 1
        edited[provider] = n + 1
    for _, root in runs.values():
        feed(root, "2-more", more)
    answers = probe(version, *(["run", ckpt, str(root), p, "4", "dedup"] for (_, p), (ckpt, root) in runs.items()),
                    *(["state", ckpt] for ckpt, _ in runs.values()))
    states = dict(zip(runs, answers[len(runs):], strict=True))
    for provider in ("rocksdb", "hdfs"):
        (ckpt, root), (ref, ref_root) = runs["ckpt", provider], runs["ref", provider]
        assert sorted(states["ckpt", provider]) == sorted(states["ref", provider]) == ["a", "b", "c", "d", "x"]
        resumed = CheckpointReader(ckpt).resolve_batch(None)
        assert resumed == edited[provider] + 1  # the input after the edit ran once
        assert batch_output(root, resumed) == batch_output(ref_root, CheckpointReader(ref).resolve_batch(None)) == \
            [{"k": "d", "v": 5}, {"k": "x", "v": 42}]


def test_an_apply_in_pandas_with_state_stream_repaired_in_place_resumes_and_ends_as_if_it_never_saw_the_bad_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """applyInPandasWithState's group state (count and sum per key, a struct beside its
    timeout), HDFS-backed and RocksDB: the bogus key deleted and the real key set back to the
    value it held before the bad record (read from a run on the good input alone), checked by
    Spark's state reader, the stream resumes and its state equals that of a run that never
    saw the bad input."""
    from airflow_provider_streamstate.engine.edit.changes import matching_entries
    from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource

    version = spark_versions.get("4.1")
    monkeypatch.setenv(ENV_UNMANAGED_WINDOW, "0")
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    kinds = ("apiws-hdfs", "apiws-rocksdb")
    runs = {}  # kind -> {run: (checkpoint, input)}: poisoned, the good input alone, the reference
    for kind in kinds:
        runs[kind] = {name: (str(tmp_path / kind / name), tmp_path / kind / f"{name}-in")
                      for name in ("poisoned", "good", "reference")}
        for name, files in (("poisoned", {"0-good": GOOD, "1-bad": BAD}), ("good", {"0-good": GOOD}),
                            ("reference", {"0-good": GOOD, "2-more": MORE})):
            for file, records in files.items():
                feed(runs[kind][name][1], file, records)
    probe(version, *(["run", ckpt, str(root), kind, "4"] for kind in kinds for ckpt, root in runs[kind].values()))

    for kind in kinds:
        ckpt, good = runs[kind]["poisoned"][0], runs[kind]["good"][0]
        n = CheckpointReader(ckpt).resolve_batch(None)
        (before,) = [v for k, v in matching_entries(CheckpointSource(good), 0, "default", None) if k == ["a"]]
        edit = EditSpec.from_json({"delete": ["bot"], "set": [{"key": "a", "value": before}]}, "planted bad records")
        result = edit_stream(LocalStore(tmp_path / kind / "snapshots", fsync=False), "counts", ckpt, edit,
                             apply=True, command=check_command(version), requested_by="test")
        assert result.edit_batch == n + 1 and result.preview.changed == 2, kind
        assert result.spark is not None and result.spark["keys_checked"] == 2, kind
        assert result.spark["entries"] == {"0/default": 5}, kind

    for kind in kinds:
        feed(runs[kind]["poisoned"][1], "2-more", MORE)
    answers = probe(version, *(["run", runs[k]["poisoned"][0], str(runs[k]["poisoned"][1]), k, "4"] for k in kinds),
                    *(step for k in kinds for step in (["state", runs[k]["poisoned"][0]],
                                                       ["state", runs[k]["reference"][0]])))
    for i, kind in enumerate(kinds):
        repaired, reference = answers[len(kinds) + 2 * i], answers[len(kinds) + 2 * i + 1]
        assert repaired == reference and len(reference) == 7, (kind, repaired, reference)
        assert "[3, 15]" in json.dumps(reference["a"]) and "[1, 1]" in json.dumps(reference["bot"]), reference
        # The engine's reading of the resumed state says the same, field by field.
        resumed = runs[kind]["poisoned"][0]
        assert lookup_key(resumed, key={"k": "a"}).value == {"groupState": {"c": 3, "s": 15}}, kind
        assert lookup_key(resumed, key={"k": "bot"}).value == {"groupState": {"c": 1, "s": 1}}, kind


def test_the_cli_repairs_a_stopped_stream_from_its_spec_with_sparks_check_through_the_specs_spark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`streamstate state edit --spec`: the dry run, then --apply, Spark's check submitted
    through the spec's Spark (spark-submit of the main line, as for a rescale)."""
    from airflow_provider_streamstate.cli import main
    from airflow_provider_streamstate.spec import StreamSpec

    version = spark_versions.get("4.1")
    monkeypatch.setenv(ENV_UNMANAGED_WINDOW, "0")
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PROBE_CONF", json.dumps(
        {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}))
    ckpt, root, ref, ref_root = (str(tmp_path / "ckpt"), tmp_path / "root", str(tmp_path / "ref"),
                                 tmp_path / "ref-root")
    feed(root, "0-good", GOOD)
    feed(root, "1-bad", BAD)
    feed(ref_root, "0-good", GOOD)
    feed(ref_root, "2-more", MORE)
    probe(version, ["run", ckpt, str(root), "rocksdb", "4"], ["run", ref, str(ref_root), "rocksdb", "4"])
    spec = json.dumps(StreamSpec(name="counts", checkpoint=ckpt, store=str(tmp_path / "snapshots"),
                                 master="local[2]").to_dict())
    a = [r["v"] for r in GOOD if r["k"] == "a"]
    edit = json.dumps({"delete": [{"k": "bot"}], "set": [{"key": {"k": "a"}, "value": [len(a), sum(a)]}]})

    assert main(["state", "edit", "--spec", spec, "--edit", edit]) == 0
    out = capsys.readouterr().out
    assert "would change 2 key(s) of counts" in out and "nothing was written" in out
    assert main(["state", "edit", "--spec", spec, "--edit", edit, "--apply", "--description", "planted", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["spark"]["spark_version"] == version.pyspark and r["spark"]["keys_checked"] == 2
    assert r["pinned"] == r["source_snapshot"] and r["edited_snapshot"]

    feed(root, "2-more", MORE)
    _, repaired, reference = probe(version, ["run", ckpt, str(root), "rocksdb", "4"], ["state", ckpt], ["state", ref])
    assert repaired == reference and reference["a"] == [3, 15]


GOLDEN_CASES = (("windowed_aggregation_rocksdb_changelog_format_2", 1), ("windowed_aggregation_hdfs", 1),
                ("small_aggregation_rocksdb_changelog", 1), ("typed_dedup_hdfs", 0),
                ("apply_in_pandas_with_state_rocksdb_changelog", 1), ("apply_in_pandas_with_state_hdfs", 1))
# applyInPandasWithState's group state (a struct value with its timeout) on one line each: the
# newest for RocksDB, the main line for HDFS-backed state.
ONE_LINE = {"apply_in_pandas_with_state_rocksdb_changelog": "4.3", "apply_in_pandas_with_state_hdfs": "4.1"}


def golden_lines() -> list[Any]:
    """Per Spark line, the goldens it wrote that an edit is checked on (one Spark application
    checks them all: a JVM start is the dearest part of each check)."""
    from tests.goldens import goldens

    by_line: dict[str, list[tuple[Any, int]]] = {}
    for case, sets in GOLDEN_CASES:
        for g in goldens(case):
            if g.line != "3.5" and (g.line, g.case) != ("4.0", "small_aggregation_rocksdb_changelog") \
                    and ONE_LINE.get(case, g.line) == g.line:
                by_line.setdefault(g.line, []).append((g, sets))
    return [pytest.param(line, items, id=f"spark-{line}") for line, items in sorted(by_line.items())]


@pytest.mark.parametrize(("line", "items"), golden_lines())
def test_sparks_state_reader_of_each_line_reads_its_edited_goldens_as_the_engine_does(
        line: str, items: list[tuple[Any, int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows (struct keys with timestamps), deduplication, applyInPandasWithState's group
    state, checkpoint format 2: the check job, in the Spark that wrote each golden, agrees
    with the engine's reading of its edit: the change in entries from the batch before that
    the proof by the changes gives, and the count the digest of the whole state gives."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.engine.edit.batch import write_edit_batch
    from airflow_provider_streamstate.engine.edit.changes import compile_changes
    from airflow_provider_streamstate.engine.edit.preview import current_values
    from airflow_provider_streamstate.engine.edit.spark_check import EditedCopy, ExpectedEntries, spark_checks
    from airflow_provider_streamstate.engine.edit.verify import verified_batch
    from airflow_provider_streamstate.engine.lookup.digest import state_digest
    from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource
    from tests.edits import repair_of, work_copy

    version = spark_versions.get(line)
    if not version.installed():
        pytest.skip(f"Spark {line} is not installed here: run `make setup`")
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    copies, wanted = [], []
    for g, sets in items:
        work = work_copy(g, tmp_path / g.case)
        edit, gone, changed = repair_of(g, deletes=2, sets=sets)
        src = CheckpointSource(work)
        changes = compile_changes(src, EditSpec.from_json(edit))
        old, restored = current_values(src, changes), open_checkpoint_fs(work).versions()
        batch = write_edit_batch(open_checkpoint_fs(work), src.batch_id, changes)
        digest = state_digest(work, batch.batch_id)
        proof = verified_batch(open_checkpoint_fs(work), batch, changes, old, restored, what="not proved", hint="-")
        assert proof.stores[0].entries_change == -len(gone), g.case
        assert digest.stores[0].entries == len(g.state().rows) - len(gone), g.case
        copies.append(EditedCopy(open_checkpoint_fs(work), batch.batch_id, ExpectedEntries.of_change(proof), changes))
        wanted.append((g.case, len(gone) + len(changed), {"0/default": digest.stores[0].entries}))

    checked = spark_checks("golden", copies, check_command(version))

    assert [(case, c.spark_version, c.keys_checked, c.entries) for (case, _, _), c in zip(wanted, checked, strict=True)] \
        == [(case, version.pyspark, keys, entries) for case, keys, entries in wanted]


def test_a_new_query_version_with_one_more_aggregate_starts_on_the_migrated_state_and_continues_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counting stream's next version also keeps the max of each key: Spark refuses it on
    the old state (its schema differs); migrated to the schema the new version writes (the
    new column null, as the max of nothing), it starts on it and goes on from the same batch
    with the counts and sums carried over, and the max of the input it reads since: RocksDB
    state (changelog on) and HDFS-backed state, side by side in one Spark process per step."""
    import shutil

    from airflow_provider_streamstate.engine.edit.migrate import migration_to

    version = spark_versions.get("4.1")
    monkeypatch.setenv(ENV_UNMANAGED_WINDOW, "0")
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PROBE_CONF", json.dumps(
        {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}))
    providers = ("rocksdb", "hdfs")
    ckpt = {p: str(tmp_path / p / "ckpt") for p in providers}
    root = {p: tmp_path / p / "root" for p in providers}
    scratch, scratch_root = {p: str(tmp_path / p / "v2-scratch") for p in providers}, tmp_path / "v2-root"
    for p in providers:
        feed(root[p], "0-good", GOOD)
    feed(scratch_root, "0-one", GOOD[:1])
    probe(version, *(["run", ckpt[p], str(root[p]), p, "4"] for p in providers))
    n = {p: CheckpointReader(ckpt[p]).resolve_batch(None) for p in providers}
    unmigrated = {p: str(tmp_path / p / "unmigrated") for p in providers}
    for p in providers:
        feed(root[p], "2-more", MORE)  # a batch to run: Spark checks the state's schema when it loads it
        shutil.copytree(ckpt[p], unmigrated[p])
    answers = probe(version, *(step for p in providers for step in (
        ["run", unmigrated[p], str(root[p]), p, "4", "v2"], ["run", scratch[p], str(scratch_root), p, "4", "v2"])))
    for p, refused in zip(providers, answers[::2], strict=True):
        assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in refused["error_classes"], (p, refused)

    for p in providers:
        store = LocalStore(tmp_path / p / "snapshots", fsync=False)
        done = edit_stream(store, "counts", ckpt[p], migration_to(scratch[p]), apply=True,
                           command=check_command(version))
        assert done.edit_batch == n[p] + 1 and done.preview.changed == len({r["k"] for r in GOOD}), p
        assert done.spark is not None and done.spark["spark_version"] == version.pyspark

    answers = probe(version, *(["run", ckpt[p], str(root[p]), p, "4", "v2"] for p in providers),
                    *(["state", ckpt[p]] for p in providers))
    expected: dict[str, list[Any]] = {}
    for r in GOOD + MORE:
        c, s, m = expected.get(r["k"], [0, 0, None])
        new_max = m if r not in MORE else r["v"] if m is None else max(m, r["v"])
        expected[r["k"]] = [c + 1, s + r["v"], new_max]
    a = [r["v"] for r in GOOD if r["k"] == "a"]
    for i, p in enumerate(providers):
        assert "refused" not in answers[i] and CheckpointReader(ckpt[p]).resolve_batch(None) == n[p] + 2, p
        # The key's history reads each batch in the schema it was written in: before the migration, after it.
        assert lookup_key(ckpt[p], key={"k": "a"}, batch_id=n[p]).value == {"count": len(a), "sum": sum(a)}
        assert lookup_key(ckpt[p], key={"k": "a"}, batch_id=n[p] + 1).value == \
            {"count": len(a), "sum": sum(a), "max": None}
        assert answers[len(providers) + i] == expected, p


def test_sparks_state_reader_reads_a_migration_of_columns_of_one_buffer_name_paired_by_position(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A golden of `first` over 19 columns of every type (19 columns `first`, 19 `valueSet` in
    one store), migrated with each paired to its namesake by position and one column more:
    Spark 4.1's state reader reads the migrated copy as the engine wrote it (binary values
    too), before anything is swapped in."""
    from airflow_provider_streamstate.engine.edit.migrate import migration_to
    from tests.edits import work_copy
    from tests.goldens import goldens
    from tests.unit.test_edit_migrate import typed_version

    version = spark_versions.get("4.1")
    if not version.installed():
        pytest.skip("Spark 4.1 is not installed here: run `make setup`")
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    (g,) = [g for g in goldens("typed_values_rocksdb_changelog") if g.line == "4.1"]
    target, names = typed_version(tmp_path / "v2", g, ("n", "long", True))
    m = migration_to(target, pairs={n: n for n in names})
    done = edit_stream(LocalStore(tmp_path / "store", fsync=False), "typed", work_copy(g, tmp_path), m, apply=True,
                       command=check_command(version))
    assert done.spark is not None and done.spark["entries"] == {"0/default": len(g.state().rows)}
    assert done.spark["keys_checked"] == min(SPARK_KEYS, len(g.state().rows))
