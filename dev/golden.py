"""Golden checkpoints, as Delta Lake keeps golden tables: checkpoints written by real Spark,
one named function per case in dev/golden_cases.py (an operator on a state store; dedicated
cases for a reader test's own needs), generated on each Spark line that supports the case, into
tests/golden/spark-<line>/<case>/ with `golden.json`: the Spark version, the query (the
case's source), the confs, the last committed batch and what Spark's own state reader
returned on the checkpoint (per reader option set, rows in tests/goldens.py's JSON). The
readers' tests (tests/unit/test_lookup_goldens.py and the others that read them) run at unit
speed on them; tests/integration/test_goldens.py regenerates cases with today's Spark and
compares what must be equal (the reader's entries, the file layout), so they cannot drift.

    make golden                                          # every case on every installed line
    .venv/bin/python dev/golden.py [--line 4.1 ...] [--case NAME ...] [--out DIR]
    .venv/bin/python dev/golden.py --check NAME [--line 4.1]   # regenerate into a temp dir, compare
    .venv/bin/python dev/golden.py --list

The source is deterministic (`rate-micro-batch`: batch b holds rows b*n .. b*n+n-1 with
event times b seconds in), so entries at a batch are the same on every run; what legitimately
differs between two runs (when the maintenance thread writes store snapshots, uuids in file
names, query ids, timestamps) is left out of the comparison. Spark 3.5 has no state reader,
and Spark 4.0's cannot read checkpoint format 2: those goldens' entries are what the main
line's reader returns on them (`reader_spark`, and `reader_error` says why).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dev.golden_cases import CASES, FORMAT_CONF, HDFS, ROCKS_CL, Case  # noqa: E402

GOLDEN = REPO / "tests" / "golden"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


# --- writing a case -----------------------------------------------------------------------


def _committed(checkpoint: Path) -> list[int]:
    commits = checkpoint / "commits"
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else []


def _session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName("streamstate-golden").master("local[2]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "4")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _store_confs(store: str) -> dict[str, str]:
    provider = {HDFS: "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}.get(
        store, "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    confs = {"spark.sql.streaming.stateStore.providerClass": provider}
    if store != HDFS:
        confs[CHANGELOG_CONF] = str(store == ROCKS_CL).lower()
    return confs


def _with_confs(spark: Any, values: dict[str, str]) -> dict[str, str | None]:
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    return before


def _restore_confs(spark: Any, before: dict[str, str | None]) -> None:
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def run_case(spark: Any, c: Case, checkpoint: Path, *, until: int | None = None) -> int:
    """Run the case's query into `checkpoint` until batch `until` (the case's last batch by
    default) is committed; the last committed batch (the query is stopped at once after, so it
    may be a little later: every batch's rows are fixed by its id, whatever the timing)."""
    settings = {**_store_confs(c.store), "spark.sql.shuffle.partitions": "4",
                "spark.sql.streaming.stateStore.minDeltasForSnapshot": "3", **c.confs}
    target = c.batches if until is None else until
    before = _with_confs(spark, settings)
    try:
        q = c.build(spark).writeStream.format("noop").outputMode(c.mode) \
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds").start()
        deadline = time.monotonic() + 300
        try:
            while not q.lastProgress or q.lastProgress["batchId"] < target:
                if q.exception() is not None:
                    raise RuntimeError(f"{c.name}: {q.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{c.name}: batch {target} not reached in 300 s")
                time.sleep(0.1)
        finally:
            q.stop()
    finally:
        _restore_confs(spark, before)
    return _committed(checkpoint)[-1]


def _checkpoint_format(checkpoint: Path, batch: int) -> str:
    """The checkpoint format the batch was written in, as the engine's reader finds it (Spark's
    state reader reads format 2 only when told)."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader

    return str(CheckpointReader(str(checkpoint)).checkpoint_format(batch))


def _raw(value: Any, spark_type: Any) -> Any:
    """A collected value as it is, but for timestamps: PySpark gives them as this machine's
    local naive time, kept as aware UTC so that a golden means the same in any time zone."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(spark_type, T.TimestampType):
        return value.astimezone(dt.UTC)
    if isinstance(spark_type, T.StructType):
        return tuple(_raw(v, f.dataType) for v, f in zip(value, spark_type.fields, strict=True))
    if isinstance(spark_type, T.ArrayType):
        return [_raw(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, T.MapType):
        return {_raw(k, spark_type.keyType): _raw(v, spark_type.valueType) for k, v in value.items()}
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def read_entries(spark: Any, checkpoint: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Spark's state reader on the checkpoint with `options` (its format and changelog setting
    taken from the checkpoint, as the engine's reader does): its schema and its rows (values in
    tests/goldens.py's JSON, one list per row in the schema's column order), in the reader's
    order (a list state's elements come in the list's order)."""
    from tests.goldens import encode

    batch = int(options["batchId"])
    changelog = any(checkpoint.joinpath("state").rglob("*.changelog"))
    settings = {FORMAT_CONF: _checkpoint_format(checkpoint, batch), CHANGELOG_CONF: str(changelog).lower()}
    before = _with_confs(spark, settings)
    try:
        _ = spark.streams.active  # PySpark 4.1: creates the StateStoreCoordinator a RocksDB read needs
        reader = spark.read.format("statestore")
        for k, v in options.items():
            reader = reader.option(k, str(v))
        df = reader.load(str(checkpoint))
        rows = df.collect()
    finally:
        _restore_confs(spark, before)
    fields = df.schema.fields
    encoded = [[encode(_raw(r[i], f.dataType)) for i, f in enumerate(fields)] for r in rows]
    return {"schema": df.schema.jsonValue(), "rows": encoded}


def dump(record: dict[str, Any]) -> str:
    """golden.json's text: the record's fields indented, each entry of a reader on a line."""
    readers = record["readers"]
    head = json.dumps({**record, "readers": "@READERS@"}, indent=1, sort_keys=True, ensure_ascii=False)
    blocks = []
    for r in readers:
        rows = ",\n".join("   " + json.dumps(row, ensure_ascii=False, separators=(",", ":")) for row in r["rows"])
        blocks.append('  {"options": ' + json.dumps(r["options"], sort_keys=True) + ',\n   "schema": '
                      + json.dumps(r["schema"], sort_keys=True, separators=(",", ":")) + ',\n   "rows": [\n'
                      + rows + "\n  ]}")
    return head.replace('"@READERS@"', "[\n" + ",\n".join(blocks) + "\n ]" if blocks else "[]") + "\n"


def reader_outputs(spark: Any, c: Case, checkpoint: Path, last: int) -> list[dict[str, Any]]:
    out = []
    for options in c.readers:
        batches = _committed(checkpoint) if options.get("batchId") == "each" else [options.get("batchId", last)]
        for batch in batches:
            opts = {**options, "batchId": int(batch)}
            out.append({"options": {k: (v if k == "batchId" else str(v)) for k, v in opts.items()},
                        **read_entries(spark, checkpoint, opts)})
    return out


def write_case(spark: Any, c: Case, target: Path, line: str) -> dict[str, Any]:
    """Write the case into `target` (replaced): its checkpoint and golden.json."""
    import pyspark

    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    checkpoint = target / "checkpoint"
    last = run_case(spark, c, checkpoint)
    readers, reader_error = [], None
    if tuple(int(x) for x in spark.version.split(".")[:2]) < (4, 0):
        reader_error = f"Spark {spark.version} has no state data source"
    else:
        try:
            readers = reader_outputs(spark, c, checkpoint, last)
        except Exception as exc:  # noqa: BLE001 - this Spark's reader cannot: the main line's reads it
            reader_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    record = {
        "case": c.name, "line": line, "spark": spark.version, "pyspark": pyspark.__version__,
        "generated": dt.date.today().isoformat(), "state_store": c.store, "output_mode": c.mode,
        "confs": {**_store_confs(c.store), "spark.sql.shuffle.partitions": "4",
                  "spark.sql.streaming.stateStore.minDeltasForSnapshot": "3", **c.confs},
        "batches_asked": c.batches, "last_batch": last, "query": c.source(),
        "reader_spark": None if reader_error else spark.version, "reader_error": reader_error,
        "readers": readers,
    }
    (target / "golden.json").write_text(dump(record))
    return record


# --- comparing two generations of a case -----------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_IN_FLIGHT = re.compile(r"\.tmp(\.crc)?$")
_VERSIONED = re.compile(r"^\.?(\d+)(?:_[^.]+)?\.(delta|changelog|zip|snapshot)(?:\.crc)*$")


def layout(checkpoint: Path, last: int, *, changelog: bool) -> list[str]:
    """The checkpoint's files that any run of the case writes the same way up to batch
    `last`: logs up to it, operator metadata and schemas, and the state files each commit
    writes (deltas, changelogs; zips when RocksDB commits them itself), uuids masked. Left
    out: what the maintenance thread writes when it gets to it (store snapshots, the tables a
    changelog-mode zip references, and the temporary files it renames into place, seen when
    the listing catches it mid-write) and anything after `last`."""
    out = []
    for p in sorted(checkpoint.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(checkpoint).as_posix()
        parts = rel.split("/")
        name = parts[-1]
        if _IN_FLIGHT.search(name):
            continue
        if parts[0] in ("offsets", "commits") and name.lstrip(".").split(".")[0].isdigit():
            if int(name.lstrip(".").split(".")[0]) > last:
                continue
        elif parts[0] == "state":
            if "SSTs" in parts or "logs" in parts:
                if changelog:
                    continue
                out.append(re.sub(r"[^/]+\.(sst|log)(\.crc)?$", r"*.\1\2", _UUID.sub("<uuid>", rel)))
                continue
            m = _VERSIONED.match(name)
            if m:
                version, kind = int(m.group(1)), m.group(2)
                if version > last + 1 or kind == "snapshot" or (kind == "zip" and changelog):
                    continue
            if "_metadata" in parts and parts[-1].isdigit() and int(parts[-1]) > last:
                continue
        out.append(_UUID.sub("<uuid>", re.sub(r"_[0-9a-f-]{36}\.", "_<id>.", rel)))
    return sorted(set(out))


RUN_TIMES = frozenset({"ttlExpirationMs"})  # fields whose values are times the case ran at


def _without_run_times(value: Any, data_type: Any) -> Any:
    """`value` (a row or a field of one, structs as {"$tuple": [...]}) with the fields named
    in RUN_TIMES (a TTL state's expiration: processing time plus the TTL) in place but
    unvalued, so a case regenerated another day compares equal."""
    if not (isinstance(data_type, dict) and data_type.get("type") == "struct"
            and isinstance(value, dict) and "$tuple" in value):
        return value
    fields = data_type["fields"]
    return {"$tuple": [("a time" if f["name"] in RUN_TIMES and isinstance(v, int) else
                        _without_run_times(v, f["type"])) for f, v in zip(fields, value["$tuple"], strict=True)]}


def _by_key(reader: dict[str, Any], *, timed: bool = False) -> dict[str, list[str]]:
    """A reader's rows grouped by key, in the reader's order within a key (a list state's
    elements, a join side's values), whatever order the partitions or keys came in; for a
    `timed` reader (its values are times the case ran at) only how many rows each key has,
    and in any reader a TTL's expiration time only as there (RUN_TIMES)."""
    fields = reader["schema"]["fields"]
    key = [f["name"] for f in fields].index("key")
    out: dict[str, list[str]] = {}
    for row in reader["rows"]:
        kept = [_without_run_times(v, f["type"]) for f, v in zip(fields, row, strict=True)]
        out.setdefault(json.dumps(row[key], sort_keys=True), []).append("a row" if timed else
                                                                        json.dumps(kept, sort_keys=True))
    return out


def compare(golden_dir: Path, fresh_dir: Path) -> list[str]:
    """What differs between a committed golden and the same case regenerated: the reader's
    entries for every recorded option set, and the file layout; [] when they agree."""
    old = json.loads((golden_dir / "golden.json").read_text())
    new = json.loads((fresh_dir / "golden.json").read_text())
    problems = []
    for key in ("case", "state_store", "output_mode", "confs", "query"):
        if old[key] != new[key]:
            problems.append(f"{key}: {old[key]!r} != {new[key]!r}")
    timed_options = {json.dumps({k: str(v) for k, v in t.items()}, sort_keys=True) for t in CASES[old["case"]].timed}

    def timed(options: str) -> bool:
        return json.dumps({k: v for k, v in json.loads(options).items() if k != "batchId"}, sort_keys=True) \
            in timed_options

    old_readers = {json.dumps(r["options"], sort_keys=True): r for r in old["readers"]}
    new_readers = {json.dumps(r["options"], sort_keys=True): r for r in new["readers"]}
    for options, reader in old_readers.items():
        rows = reader["rows"]
        if options not in new_readers:
            problems.append(f"the regenerated case has no reader output for {options}")
        elif new_readers[options]["schema"] != reader["schema"]:
            problems.append(f"the reader's schema differs for {options}")
        elif _by_key(new_readers[options], timed=timed(options)) != _by_key(reader, timed=timed(options)):
            gone = [r for r in rows if r not in new_readers[options]["rows"]]
            added = [r for r in new_readers[options]["rows"] if r not in rows]
            problems.append(f"entries differ for {options}: {len(gone)} only in the golden, {len(added)} only "
                            f"today (e.g. {(gone or added)[0]})")
    changelog = old["confs"].get(CHANGELOG_CONF) == "true"
    old_files = layout(golden_dir / "checkpoint", old["last_batch"], changelog=changelog)
    new_files = layout(fresh_dir / "checkpoint", old["last_batch"], changelog=changelog)
    if old_files != new_files:
        problems.append(f"the file layout differs: only in the golden {sorted(set(old_files) - set(new_files))}, "
                        f"only today {sorted(set(new_files) - set(old_files))}")
    return problems


def regenerate(spark: Any, name: str, golden_dir: Path, into: Path) -> list[str]:
    """Regenerate case `name` into `into`, run to the golden's last batch (so every recorded
    reader batch exists), and compare it with the golden in `golden_dir`."""
    c = CASES[name]
    old = json.loads((golden_dir / "golden.json").read_text())
    into.mkdir(parents=True, exist_ok=True)
    checkpoint = into / "checkpoint"
    if checkpoint.exists():
        shutil.rmtree(checkpoint)
    run_case(spark, c, checkpoint, until=old["last_batch"])
    # Entries are compared where this line's own reader wrote them; a golden the main line's
    # reader read (3.5, and what a line's reader cannot read) is compared on its layout.
    own_reader = old["reader_spark"] is not None and old["reader_spark"] == old["spark"]
    readers = [{"options": r["options"], **read_entries(spark, checkpoint, r["options"])} for r in old["readers"]] \
        if own_reader else old["readers"]
    record = {**old, "spark": spark.version, "readers": readers, "query": c.source()}
    (into / "golden.json").write_text(dump(record))
    return compare(golden_dir, into)


# --- the command ---------------------------------------------------------------------------


def _line_version() -> tuple[int, int]:
    import pyspark

    return tuple(int(x) for x in pyspark.__version__.split(".")[:2])  # type: ignore[return-value]


def _in_this_python(args: argparse.Namespace, line: str) -> int:
    """Generate or check in this interpreter (the line's own venv)."""
    spark = _session()
    version = _line_version()
    names = args.case or [n for n, c in CASES.items() if version >= c.since]
    failed = 0
    for name in names:
        c = CASES[name]
        if version < c.since:
            print(f"spark-{line} {name}: skipped (needs Spark {'.'.join(map(str, c.since))}+)")
            continue
        target = args.out / f"spark-{line}" / name
        started = time.monotonic()
        if args.check:
            with tempfile.TemporaryDirectory(prefix="golden-check-") as tmp:
                problems = regenerate(spark, name, target, Path(tmp))
            failed += bool(problems)
            print(f"spark-{line} {name}: {'drifted' if problems else 'as committed'} "
                  f"({time.monotonic() - started:.0f} s)" + "".join(f"\n  {p}" for p in problems))
        else:
            record = write_case(spark, c, target, line)
            print(f"spark-{line} {name}: batch {record['last_batch']}, "
                  f"{sum(len(r['rows']) for r in record['readers'])} entries recorded ({time.monotonic() - started:.0f} s)")
    spark.stop()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    from dev import spark_versions

    parser = argparse.ArgumentParser(prog="dev/golden.py", description=__doc__.split("\n")[0])
    parser.add_argument("--line", action="append", help="a Spark line (dev/spark_versions.py); default: every installed one")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="a case; default: every case the line has")
    parser.add_argument("--out", type=Path, default=GOLDEN, help="where the goldens are (default tests/golden)")
    parser.add_argument("--check", action="store_true", help="regenerate into a temporary directory and compare")
    parser.add_argument("--list", action="store_true", help="list the cases")
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # already in the line's Python
    args = parser.parse_args(argv)
    if args.list:
        for c in CASES.values():
            print(f"{c.name:48} {c.store:18} {c.batches} batches, Spark {'.'.join(map(str, c.since))}+")
        return 0
    if args.here:
        return _in_this_python(args, args.line[0])
    lines = args.line or [v.line for v in spark_versions.SUPPORTED if v.installed()]
    rc = 0
    for line in lines:
        version = spark_versions.get(line).require()
        cmd = [str(version.python), str(Path(__file__).resolve()), "--here", "--line", line, "--out", str(args.out),
               *(["--check"] if args.check else []), *(a for c in args.case or [] for a in ("--case", c))]
        rc |= subprocess.run(cmd, env=version.env({"PATH": os.environ["PATH"]}), cwd=REPO).returncode
    if not args.check and spark_versions.MAIN_LINE in [v.line for v in spark_versions.SUPPORTED if v.installed()]:
        rc |= _read_with_main_line(args.out, args.case)
    return rc


def _read_with_main_line(out: Path, names: list[str] | None) -> int:
    """The entries of the goldens of a line without a state reader (3.5), as the main line's
    Spark reads them (what the engine's state jobs run on by default)."""
    from dev import spark_versions

    pending = [p for p in sorted(out.glob("spark-*/*/golden.json"))
               if not json.loads(p.read_text())["reader_spark"] and CASES[p.parent.name].readers
               and (not names or p.parent.name in names)]
    if not pending:
        return 0
    main_line = spark_versions.get(spark_versions.MAIN_LINE)
    code = ("import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); from dev import golden; "
            "spark = golden._session()\n"
            "for p in map(Path, sys.argv[2:]):\n"
            "    r = json.loads(p.read_text()); c = golden.CASES[r['case']]\n"
            "    r['readers'] = golden.reader_outputs(spark, c, p.parent / 'checkpoint', r['last_batch'])\n"
            "    r['reader_spark'] = spark.version\n"
            "    p.write_text(golden.dump(r))\n"
            "    print(f\"{p.parent.parent.name} {r['case']}: read with Spark {spark.version}\")\n")
    return subprocess.run([str(main_line.python), "-c", code, str(REPO), *map(str, pending)],
                          env=main_line.env({"PATH": os.environ["PATH"]}), cwd=REPO).returncode


if __name__ == "__main__":
    sys.exit(main())
