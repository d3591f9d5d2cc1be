"""Key lookups (engine/lookup) are exact: for real checkpoints of every supported operator,
on both state store providers, with and without changelog checkpointing and in both
checkpoint formats, a lookup of every key Spark's state reader (`format("statestore")`)
shows — up to a thousand per checkpoint — finds it in the partition Spark put it in with
the same value, and keys that are not there (near misses of real ones) are not found.
Keys and values cover every type state can hold; a transformWithState key's timers are
listed as Spark lists them. A key removed by a later delta is gone; a
corrupted or truncated file is an error naming it, and nothing of it is cached; a snapshot
in a store answers like its checkpoint, reading only the key's partition.

The checkpoints are golden ones (tests/goldens.py, written by real Spark with `make golden`,
with what Spark's reader returned on them), on every Spark line they were generated for;
tests/integration/test_goldens.py proves that today's Spark still writes them."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup import (
    CheckpointSource,
    PartitionCache,
    SnapshotSource,
    lookup_key,
)
from airflow_provider_streamstate.engine.lookup.formats.codec import decompress
from airflow_provider_streamstate.engine.lookup.formats.hdfs_state import apply_records
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import DELETE, parse_changelog
from tests.goldens import GOLDEN, Golden, golden, goldens
from tests.lookup_cases import ours_norm

SAMPLE = 1000  # present keys checked per checkpoint (all of them when fewer), and as many absent ones


def on_every_line(*cases: str) -> Any:
    """Parametrize `g` over the golden cases on every Spark line they were generated for."""
    params = [pytest.param(g, id=f"spark-{g.line}-{g.case}") for case in cases for g in goldens(case)]
    return pytest.mark.parametrize("g", params or [pytest.param(None, marks=pytest.mark.skip("no goldens"))])


# --- building keys from Spark's rows, and near misses --------------------------------------


def near_miss(key: list[Any], rnd: random.Random) -> list[Any]:
    """The key with one column changed (a value no real key has, most of the time)."""
    out = list(key)
    order = list(range(len(out)))
    rnd.shuffle(order)
    for i in order:
        v = out[i]
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            out[i] = v - 1 if v > 0 else v + 1  # in range of any integer type; maybe a real key
        elif isinstance(v, str):
            out[i] = v + "~"
        elif isinstance(v, bytes):
            out[i] = v + b"\x01"
        elif isinstance(v, float):
            out[i] = v + 12345.5
        elif isinstance(v, decimal.Decimal):
            out[i] = v + 1
        elif isinstance(v, dt.datetime):
            out[i] = v + dt.timedelta(days=4000)
        elif isinstance(v, dt.date):
            out[i] = v + dt.timedelta(days=4000)
        elif isinstance(v, list):
            out[i] = near_miss(v, rnd) if v and any(x is not None for x in v) else [1, 2, 3]
        else:
            continue
        return out
    return out + ["unused"]  # nothing to change: the lookup below then skips it


def check_single(g: Golden, *, batch: int | None = None, source: Any = None, **reader_options: Any) -> int:
    """Every key of one store as Spark read it (a sample) is found with its value in its
    partition; near misses are not found. Returns how many keys were checked."""
    rows = g.state(batchId=batch, **reader_options).rows
    assert rows, f"no state in {g.checkpoint}"
    rnd = random.Random(11)
    sample = rnd.sample(rows, min(SAMPLE, len(rows)))
    present = {r.key for r in rows}
    src = source or CheckpointSource(g.checkpoint, batch)
    op = reader_options.get("operatorId", 0)
    for r in sample:
        hit = lookup_key(src, key=r.key_input, operator=op)
        assert hit.found, (r.key, hit.partition)
        assert hit.partition == r.partition_id, (r.key, hit.partition, r.partition_id)
        assert ours_norm(hit.value, hit.value_schema) == r.value, r.key
        miss = near_miss(r.key_input, rnd)
        if len(miss) == len(r.key_input):
            res = lookup_key(src, key=miss, operator=op)
            assert res.found == (ours_norm(res.key, res.key_schema) in present), miss
    return len(sample)


# --- aggregation: both providers, changelog on and off, checkpoint formats 1 and 2 ----------

EARLY = 2  # dev/golden_cases.py: the batch whose state the cases keep for these checks


@on_every_line("windowed_aggregation_hdfs", "windowed_aggregation_rocksdb", "windowed_aggregation_rocksdb_changelog",
               "windowed_aggregation_rocksdb_changelog_format_2")
def test_windowed_aggregation_keys_are_exact_and_removed_keys_are_gone(g: Golden) -> None:
    assert check_single(g) > 100
    # Windows the watermark passed were removed by later deltas/changelogs: keys found at an
    # early batch, gone at the last one, as Spark says too.
    old = g.state(batchId=EARLY)
    now = {r.key for r in g.state().rows}
    gone = [r for r in old.rows if r.key not in now]
    assert gone, "no key was evicted"
    cache = PartitionCache()
    for r in gone[:50]:
        assert lookup_key(g.checkpoint, key=r.key_input, batch_id=EARLY, cache=cache).found
        assert not lookup_key(g.checkpoint, key=r.key_input, cache=cache).found
    if g.case in ("windowed_aggregation_hdfs", "windowed_aggregation_rocksdb_changelog"):
        assert removal_written(g.checkpoint, gone[0], EARLY, g.last_batch)


def removal_written(checkpoint: str, row: Any, early: int, last: int) -> bool:
    """A delta or changelog of the key's partition after `early` records its removal."""
    hit = lookup_key(checkpoint, key=row.key_input, batch_id=early)
    part_dir = Path(checkpoint) / "state" / "0" / str(hit.partition)
    from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import encode_row

    raw = encode_row(list(hit.key.values()), hit.key_schema)
    for v in range(early + 2, last + 2):
        delta, changelog = part_dir / f"{v}.delta", part_dir / f"{v}.changelog"
        if delta.exists():
            state = {raw: b"x"}
            apply_records(state, decompress(delta.read_bytes(), "lz4", str(delta)), str(delta), removals=True)
            if raw not in state:
                return True
        if changelog.exists():
            _, records = parse_changelog(decompress(changelog.read_bytes(), "lz4", str(changelog)), str(changelog))
            if any(kind == DELETE and key == b"\x00" + raw for kind, key, _ in records):
                return True
    return False


# --- every type as a key column (dropDuplicates) and as a value column (aggregate buffers) ---


@on_every_line("typed_dedup_hdfs", "typed_dedup_rocksdb_changelog")
def test_every_type_as_a_dedup_key(g: Golden) -> None:
    assert check_single(g) >= SAMPLE


@on_every_line("typed_values_rocksdb_changelog")
def test_every_type_as_a_value_column(g: Golden) -> None:
    assert check_single(g) == 97


@on_every_line("dedup_with_watermark_hdfs")
def test_dropduplicates_with_a_watermark(g: Golden) -> None:
    assert check_single(g) > 100


@on_every_line("dedup_within_watermark_rocksdb")
def test_dropduplicates_within_watermark(g: Golden) -> None:
    assert check_single(g) >= 50


# --- stream-stream joins, applyInPandasWithState, transformWithState ------------------------


@on_every_line("join_hdfs", "join_rocksdb", "join_rocksdb_changelog_format_3")
def test_stream_stream_join_sides(g: Golden) -> None:
    src = CheckpointSource(g.checkpoint)
    for side in ("left", "right"):
        expected: dict[Any, list[Any]] = {}
        keys: dict[Any, Any] = {}
        for r in g.state(joinSide=side).rows:
            expected.setdefault(r.key, []).append(r.value)
            keys[r.key] = (r.key_input, r.partition_id)
        assert len(keys) > 100
        for k, (key, partition) in keys.items():
            hit = lookup_key(src, key=key, join_side=side)
            assert hit.found and hit.partition == partition, key
            assert sorted(map(repr, (ours_norm(v, hit.value_schema) for v in hit.value))) == \
                sorted(map(repr, expected[k])), key
        for absent in (10_000, 10_001, -5):
            assert not lookup_key(src, key=[absent], join_side=side).found


@on_every_line("apply_in_pandas_with_state_hdfs", "apply_in_pandas_with_state_rocksdb_changelog")
def test_apply_in_pandas_with_state(g: Golden) -> None:
    assert check_single(g) == 211


@on_every_line("transform_with_state_rocksdb_changelog")
def test_transform_with_state_value_list_and_map_state(g: Golden) -> None:
    src = CheckpointSource(g.checkpoint)
    rnd = random.Random(3)
    # Timers: every key's registered timers, in time order, as Spark's reader lists them.
    timers: dict[int, list[int]] = {}
    for r in g.state(readRegisteredTimers="true").rows:
        timers.setdefault(r.key[0], []).append(r.expiration_timestamp_ms)
    assert len(timers) == 120
    for k in range(120):
        hit = lookup_key(src, key=[k], state_var="$timers")
        assert hit.kind == "timers" and [t["expiration_timestamp_ms"] for t in hit.value] == sorted(timers[k]), k
    assert not lookup_key(src, key=[999], state_var="$timers").found
    for var, kind in (("cnt", "value"), ("items", "list"), ("bymod", "map")):
        expected: dict[Any, list[Any]] = {}
        keys = {}
        for r in g.state(stateVarName=var).rows:
            if kind == "value":
                item = r.value
            elif kind == "list":
                item = r.list_element
            else:
                item = (r.user_map_key, r.user_map_value)
            expected.setdefault(r.key, []).append(item)
            keys[r.key] = (r.key_input, r.partition_id)
        # Keys 0 mod 3 append no item; map keys 4 mod 5 may have had their only entry removed.
        assert len(keys) == {"cnt": 120, "items": 80}.get(var, len(keys)) and len(keys) >= 80
        for k in range(120):
            hit = lookup_key(src, key=[k], state_var=var)
            if (k,) not in keys:
                assert not hit.found, (var, k)
                continue
            key, partition = keys[(k,)]
            assert hit.found and hit.partition == partition and hit.kind == kind, (var, key)
            if kind == "value":
                assert [ours_norm(hit.value, hit.value_schema)] == expected[(k,)]
            elif kind == "list":
                assert [ours_norm(v, hit.value_schema) for v in hit.value] == expected[(k,)]
            else:
                got = sorted((repr(tuple(e["key"].values())), ours_norm(e["value"], hit.value_schema))
                             for e in hit.value)
                assert got == sorted((repr(u), v) for u, v in expected[(k,)])
            assert not lookup_key(src, key=[k + 10_000 + rnd.randrange(99)], state_var=var).found


# --- damaged files, snapshots ----------------------------------------------------------------


def test_a_corrupted_or_truncated_file_is_an_error_naming_it_and_nothing_is_cached(tmp_path: Path) -> None:
    hdfs = golden("small_aggregation_hdfs")
    original = hdfs.checkpoint
    key = list(hdfs.state().rows[0].key_input)
    good = lookup_key(original, key=key)
    assert good.found
    part = Path(original) / "state" / "0" / str(good.partition)
    deltas = sorted(part.glob("*.delta"), key=lambda p: int(p.stem))

    for damage in ("truncate", "flip"):
        copy = tmp_path / f"copy-{damage}"
        shutil.copytree(original, copy)
        victim = copy / deltas[-1].relative_to(original)
        # Maintenance may have written a snapshot file covering the last delta in the
        # background; without it, the lookup must read the damaged delta to rebuild the state.
        for snapshot_file in victim.parent.glob("*.snapshot"):
            snapshot_file.unlink()
        data = victim.read_bytes()
        victim.write_bytes(data[: len(data) // 2] if damage == "truncate" else
                           data[:40] + bytes([data[40] ^ 0xFF]) + data[41:])
        cache = PartitionCache()
        for _ in range(2):  # the second attempt fails the same way: nothing was cached
            with pytest.raises(CorruptionError) as err:
                lookup_key(str(copy), key=key, cache=cache)
            assert victim.name in str(err.value) and "\n" not in err.value.one_line()
        assert len(cache) == 1  # the schema only

    # A table is read block by block, each block checked as it is read: a damaged table is
    # found by a lookup that reads it (one the lookup read, without changelogs to decide the
    # key first); a truncated changelog by any lookup of its partition.
    for case, pattern, damage in (("windowed_aggregation_rocksdb", "SSTs/*.sst", "flip"),
                                  ("small_aggregation_rocksdb_changelog", "*.changelog", "truncate")):
        g = golden(case)
        rocks_key = list(g.state().rows[0].key_input)
        hit = lookup_key(g.checkpoint, key=rocks_key)
        assert hit.found, case
        copy = tmp_path / f"rocks-{pattern[:3]}"
        shutil.copytree(g.checkpoint, copy)
        files = CheckpointSource(str(copy)).partition_files(0, hit.partition, "default")
        victims = sorted((f.path for f in files if Path(f.path).match(pattern) and
                          (damage == "truncate" or any(r.endswith(f.path) for r in hit.files_read))),
                         key=lambda p: int(Path(p).name.split("-")[0].split(".")[0]))  # the newest last
        assert victims, pattern
        victim = copy / victims[-1]
        data = victim.read_bytes()
        victim.write_bytes(data[:-7] if damage == "truncate" else data[:30] + bytes([data[30] ^ 0x55]) + data[31:])
        with pytest.raises(CorruptionError, match=victim.name):
            lookup_key(str(copy), key=rocks_key, cache=PartitionCache())


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_snapshot_answers_like_its_checkpoint_reading_only_the_keys_partition(
        tmp_path: Path, moto_endpoint: str, kind: str) -> None:
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from tests.unit.conftest import moto_bucket

    g = golden("windowed_aggregation_rocksdb_changelog")
    store = LocalStore(tmp_path / "store", fsync=False) if kind == "local" else \
        S3Store(moto_bucket(moto_endpoint, "lookups"), "lookups", f"t/{tmp_path.name}")
    m = create_snapshot(g.checkpoint, store, "agg").manifest
    assert m.batch_id == g.last_batch
    src = SnapshotSource(store, "agg", m.snapshot_id)
    assert check_single(g, batch=m.batch_id, source=src) > 100
    cache = PartitionCache()
    key = g.state(batchId=m.batch_id).rows[0].key_input
    cold = lookup_key(SnapshotSource(store, "agg", "latest"), key=key, cache=cache)
    assert cold.found and cold.bytes_read > 0 and not cold.cached
    assert all(p.startswith(f"state/0/{cold.partition}/") or "/_metadata/" in p for p in cold.files_read)
    warm = lookup_key(SnapshotSource(store, "agg", "latest"), key=key, cache=cache)
    assert warm.cached and warm.bytes_read == 0 and warm.value == cold.value


def test_state_the_engine_cannot_read_is_refused_in_one_line_on_every_line_that_writes_it() -> None:
    """Spark 3.5's joins (no operator metadata to say an operator is one), Spark 4.0's RocksDB
    zips with metadata v2: each golden of them refused in one line naming why (tests/goldens.py
    REFUSED)."""
    from airflow_provider_streamstate.engine.core.errors import StreamstateError
    from tests.goldens import REFUSED, refused

    cases = [golden(case, line) for line, case in REFUSED if (GOLDEN / f"spark-{line}" / case).is_dir()]
    for g in cases:  # at the last batch, whose state needs a table (the first batches' is in changelogs only)
        options = next(r["options"] for r in g.record["readers"] if r["options"]["batchId"] == g.last_batch)
        row = g.state(**options).rows[0]
        kw: dict[str, Any] = {"join_side": "left"} if g.case.startswith("join_") else {}
        if g.case.startswith("transform_with_state"):
            kw = {"state_var": "cnt"}
        with pytest.raises(StreamstateError, match=refused(g)) as err:
            lookup_key(g.checkpoint, key=row.key_input, **kw)
        assert "\n" not in err.value.one_line(), g.case


def test_lookups_are_refused_in_one_line_where_unsupported() -> None:
    for case, state_var, words in (("transform_with_state_avro", "cnt", "avro"),
                                   ("session_window_hdfs", None, "session window")):
        with pytest.raises(UnsupportedCheckpointError, match=words) as err:
            lookup_key(golden(case).checkpoint, key=[1], state_var=state_var)
        assert "\n" not in err.value.one_line()
