"""The stack's HDFS (Hadoop 3.4.2's MiniDFSCluster: one NameNode, one DataNode, WebHDFS on),
and the facts the HDFS checkpoint location and snapshot store are built on: PySpark in local
mode keeps a stateful stream's checkpoint at `hdfs://127.0.0.1:<port>/...` with no Hadoop
configuration at all; fsspec's WebHDFS client lists, stats, reads ranges and writes (CREATE,
then APPEND: a reader sees the file grow); RENAME refuses an existing destination file with
`{"boolean": false}` and replaces it with `renameoptions=OVERWRITE`; a directory renamed onto
an existing directory lands inside it; which exceptions fsspec raises; and the part killed and
restarted keeps its data on its ports."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from fsspec.implementations.webhdfs import WebHDFile, WebHDFS

from dev import stack as stack_mod

pytestmark = [pytest.mark.integration, pytest.mark.hdfs]


@pytest.fixture(scope="module")
def webhdfs(hdfs: stack_mod.HdfsCluster) -> WebHDFS:
    return WebHDFS("127.0.0.1", port=hdfs.http_port, user="streamstate", skip_instance_cache=True)


@pytest.fixture
def root(webhdfs: WebHDFS) -> Iterator[str]:
    """A fresh directory for one test, removed after it."""
    path = f"/tests/{uuid.uuid4().hex[:10]}"
    webhdfs.mkdir(path)
    yield path
    webhdfs.rm(path, recursive=True)


def _write(fs: WebHDFS, path: str, data: bytes) -> None:
    with fs.open(path, "wb") as f:
        f.write(data)


def _rename(fs: WebHDFS, src: str, dst: str, **options: str) -> requests.Response:
    """WebHDFS RENAME, its response as it came (fsspec's `mv` drops it)."""
    return fs._call("RENAME", method="put", path=src, destination=dst, **options)  # noqa: SLF001


def _pid(hdfs: stack_mod.HdfsCluster) -> int:
    return int((Path(hdfs.base_dir).parent / f"{stack_mod.HDFS_PART}.pid").read_text())


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process `pid` listens on, from /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address, port = fields[1].split(":")
                if table == "tcp":
                    ip = ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0))
                elif address.startswith("0000000000000000FFFF0000"):  # ::ffff:a.b.c.d
                    tail = address[24:]
                    ip = ".".join(str(int(tail[i:i + 2], 16)) for i in (6, 4, 2, 0))
                else:
                    ip = address
                out.add((ip, int(port, 16)))
    return out


def _site(conf_dir: str, name: str) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    root = ET.parse(Path(conf_dir) / name).getroot()
    return {p.findtext("name") or "": p.findtext("value") or "" for p in root.iter("property")}


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _hdfs_checksum_bytes(data: bytes) -> str:
    """GETFILECHECKSUM's `bytes` for a file of one block (< 128 MiB), computed here: bytes per
    CRC (512) and CRCs per block (0), then the MD5 of the block's MD5 (the MD5 of the big-endian
    CRC32C of each 512 bytes) in a buffer padded with zeros to 32 bytes; the hex string itself
    padded to 32 bytes too (only `length`, 28, count)."""
    crcs = b"".join(_crc32c(data[i:i + 512]).to_bytes(4, "big") for i in range(0, len(data), 512))
    block_md5 = hashlib.md5(crcs).digest()
    return (512).to_bytes(4, "big").hex() + "00" * 8 + hashlib.md5(block_md5 + bytes(16)).hexdigest() + "00000000"


def test_hdfs_listens_only_on_loopback_and_writes_the_client_configuration_hadoop_reads(
    hdfs: stack_mod.HdfsCluster,
) -> None:
    info = json.loads((Path(hdfs.conf_dir) / "hdfs-cluster.json").read_text())
    assert info["uri"] == hdfs.uri and hdfs.uri.startswith("hdfs://127.0.0.1:")
    assert info["webhdfs_url"] == hdfs.webhdfs_url and hdfs.webhdfs_url.startswith("http://127.0.0.1:")
    assert _site(hdfs.conf_dir, "core-site.xml") == {"fs.defaultFS": hdfs.uri}
    site = _site(hdfs.conf_dir, "hdfs-site.xml")
    assert site["dfs.namenode.rpc-address"] == f"127.0.0.1:{hdfs.rpc_port}"
    assert site["dfs.namenode.http-address"] == f"127.0.0.1:{hdfs.http_port}"
    assert (site["dfs.replication"], site["dfs.permissions.enabled"], site["dfs.webhdfs.enabled"]) == (
        "1", "false", "true")
    assert hdfs.env() == {"HADOOP_CONF_DIR": hdfs.conf_dir}
    listening = _listening(_pid(hdfs))
    ports = json.loads((Path(hdfs.base_dir).parent / "hdfs.json").read_text())
    # The five fixed ports, and the DataNode's internal web server on an ephemeral one.
    assert {p for _, p in listening} >= set(ports.values()), (listening, ports)
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    with requests.get(f"{hdfs.webhdfs_url}/jmx", params={"qry": "Hadoop:service=NameNode,name=FSNamesystemState"},
                      timeout=10) as r:
        state = r.json()["beans"][0]
    assert (state["NumLiveDataNodes"], state["FSState"]) == (1, "Operational")
    print(f"\nHDFS JVM RSS {_rss_mb(_pid(hdfs)):.0f} MB, listening on {sorted(listening)}")


def test_permissions_are_off_so_any_user_name_may_change_what_another_wrote_but_not_its_mode(
    hdfs: stack_mod.HdfsCluster, webhdfs: WebHDFS, root: str
) -> None:
    _write(webhdfs, f"{root}/theirs", b"x")
    assert webhdfs.info(f"{root}/theirs")["owner"] == "streamstate"
    webhdfs.chmod(root, "700")
    other = WebHDFS("127.0.0.1", port=hdfs.http_port, user="somebody-else", skip_instance_cache=True)
    _write(other, f"{root}/theirs", b"overwritten")
    assert other.cat_file(f"{root}/theirs") == b"overwritten"
    # Mode and owner changes still need the owner or the superuser: the user running the JVM.
    with pytest.raises(PermissionError, match="user=somebody-else is not the owner"):
        other.chmod(root, "777")
    superuser = WebHDFS("127.0.0.1", port=hdfs.http_port, user=getpass.getuser(), skip_instance_cache=True)
    superuser.chmod(root, "755")
    assert webhdfs.info(root)["permission"] == "755"
    other.rm(f"{root}/theirs")
    assert not webhdfs.exists(f"{root}/theirs")
    nobody = WebHDFS("127.0.0.1", port=hdfs.http_port, skip_instance_cache=True)  # no user.name: "dr.who"
    _write(nobody, f"{root}/anonymous", b"y")
    assert nobody.info(f"{root}/anonymous")["owner"] == "dr.who"


@pytest.mark.usefixtures("spark_default_checkpoint_manager")
def test_a_stateful_stream_checkpoints_to_hdfs_with_no_hadoop_configuration_and_continues_after_a_restart(
    spark: Any, hdfs: stack_mod.HdfsCluster, webhdfs: WebHDFS, root: str
) -> None:
    """pyspark 4.1.3's own Hadoop client (hadoop-client-api/runtime 3.4.2) with a full
    hdfs://127.0.0.1:<port>/ URL: no fs.defaultFS, no hdfs-site.xml, no extra jar."""
    assert spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS") == "file:///"  # noqa: SLF001
    assert "HADOOP_CONF_DIR" not in os.environ
    emitted: list[tuple[int, list[tuple[str, int]]]] = []

    def put(name: str, keys: str) -> None:
        _write(webhdfs, f"{root}/in/{name}", "".join(json.dumps({"k": k}) + "\n" for k in keys).encode())

    def run() -> float:
        started = time.monotonic()
        query = (spark.readStream.schema("k string").json(hdfs.url(f"{root}/in")).groupBy("k").count()
                 .writeStream.outputMode("update").option("checkpointLocation", hdfs.url(f"{root}/ckpt"))
                 .foreachBatch(lambda df, batch: emitted.append((batch, sorted((r.k, r["count"]) for r in df.collect()))))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None
        return time.monotonic() - started

    put("1.json", "aab")
    first = run()
    put("2.json", "ac")
    second = run()
    assert emitted == [(0, [("a", 2), ("b", 1)]), (1, [("a", 3), ("c", 1)])]
    files = webhdfs.find(f"{root}/ckpt")
    for kind in ("commits", "offsets", "sources/0"):
        assert {f"{root}/ckpt/{kind}/0", f"{root}/ckpt/{kind}/1"} <= set(files), files
    assert f"{root}/ckpt/metadata" in files
    assert any(f.startswith(f"{root}/ckpt/state/0/") for f in files), files
    commits = webhdfs.ls(f"{root}/ckpt/commits", detail=True)
    # Spark asked for no replication: the files get the NameNode's default (1 here).
    assert {c["replication"] for c in commits} == {1}
    print(f"\nstream on HDFS: first run {first:.1f}s, restart from the checkpoint {second:.1f}s; "
          f"state files {sorted(f.rsplit('/', 1)[1] for f in files if '/state/0/0/' in f)}")


def test_files_spark_creates_through_hadoops_filesystem_ask_for_three_replicas_unless_its_client_is_told(
    spark: Any, hdfs: stack_mod.HdfsCluster, webhdfs: WebHDFS, root: str
) -> None:
    """A client without hdfs-site.xml asks for Hadoop's default replication (3) when it creates
    a file through FileSystem.create (DataFrame writers): one DataNode holds one replica, the
    file is under-replicated but whole. (Checkpoint files, created through FileContext, get the
    NameNode's default instead, 1: see the stream test; so do WebHDFS CREATEs.) A writer's
    `dfs.replication` option reaches only a FileSystem created for it: Hadoop caches one per
    scheme, authority and user, made with the configuration of the first caller."""
    url = hdfs.url(root)
    spark.range(3).coalesce(1).write.parquet(f"{url}/default")
    spark.range(3).coalesce(1).write.option("dfs.replication", "1").parquet(f"{url}/cached")
    spark.range(3).coalesce(1).write.option("dfs.replication", "1").option("fs.hdfs.impl.disable.cache", "true") \
        .parquet(f"{url}/uncached")
    for name, replication in (("default", 3), ("cached", 3), ("uncached", 1)):
        files = webhdfs.ls(f"{root}/{name}", detail=True)
        assert {f["name"].rsplit("/", 1)[1].split("-")[0] for f in files} == {"_SUCCESS", "part"}
        assert {f["replication"] for f in files} == {replication}, (name, files)
    assert spark.read.parquet(f"{url}/default").count() == 3


def test_webhdfs_lists_and_stats_files_with_their_length_and_millisecond_modification_time(
    webhdfs: WebHDFS, root: str
) -> None:
    before_ms = time.time() * 1000
    _write(webhdfs, f"{root}/d/a.bin", bytes(range(256)) * 40)
    after_ms = time.time() * 1000
    info = webhdfs.info(f"{root}/d/a.bin")
    assert {k: info[k] for k in ("type", "length", "size", "replication", "blockSize", "pathSuffix")} == {
        "type": "file", "length": 10240, "size": 10240, "replication": 1, "blockSize": 134217728, "pathSuffix": ""}
    assert before_ms - 1000 <= info["modificationTime"] <= after_ms + 1000  # milliseconds since the epoch
    assert isinstance(info["modificationTime"], int) and isinstance(info["fileId"], int)
    directory = webhdfs.info(f"{root}/d")
    assert (directory["type"], directory["length"], directory["childrenNum"]) == ("directory", 0, 1)
    listed = webhdfs.ls(f"{root}/d", detail=True)
    assert [(e["name"], e["type"], e["length"], e["pathSuffix"]) for e in listed] == [
        (f"{root}/d/a.bin", "file", 10240, "a.bin")]
    # LISTSTATUS of a file answers the file itself, with an empty pathSuffix: fsspec names it "<path>/".
    assert webhdfs.ls(f"{root}/d/a.bin") == [f"{root}/d/a.bin/"]
    assert webhdfs.ls(f"{root}/d/") == [f"{root}/d/a.bin"]


def test_webhdfs_reads_ranges_with_seek_and_cat_file(webhdfs: WebHDFS, root: str) -> None:
    data = bytes(range(256)) * 40
    _write(webhdfs, f"{root}/a.bin", data)
    with webhdfs.open(f"{root}/a.bin", "rb", block_size=64) as f:
        f.seek(1000)
        assert (f.read(5), f.tell()) == (data[1000:1005], 1005)
        f.seek(-3, 2)
        assert f.read() == data[-3:]
    assert webhdfs.cat_file(f"{root}/a.bin", 10, 15) == data[10:15]
    assert webhdfs.cat_file(f"{root}/a.bin", -5, None) == data[-5:]
    assert webhdfs.cat_file(f"{root}/a.bin", 10_000, 20_000) == data[10_000:]
    # OPEN itself with an offset past the end is refused (fsspec clamps ranges before asking).
    # (403, IOException: fsspec raises RuntimeError for every exception it does not map).
    with pytest.raises(RuntimeError, match=r"Offset=20000 out of the range \[0, 10240\)"):
        webhdfs._call("OPEN", path=f"{root}/a.bin", offset=20_000)  # noqa: SLF001


def test_an_fsspec_write_creates_an_empty_file_then_appends_so_a_reader_sees_it_grow(
    webhdfs: WebHDFS, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"{root}/growing"
    seen: list[int] = []
    upload = WebHDFile._upload_chunk

    def watched(self: WebHDFile, final: bool = False) -> bool:
        seen.append(webhdfs.info(self.path)["length"])  # as another client sees it, before each APPEND
        return bool(upload(self, final))

    monkeypatch.setattr(WebHDFile, "_upload_chunk", watched)
    with webhdfs.open(path, "wb", block_size=1024) as f:
        f.write(b"a" * 1500)  # more than a block: CREATE (empty), then APPEND
        assert webhdfs.info(path)["length"] == 1500 and webhdfs.cat_file(path) == b"a" * 1500
        f.write(b"b" * 100)
    assert seen == [0, 1500]
    assert webhdfs.cat_file(path) == b"a" * 1500 + b"b" * 100
    # A small file is written at close, the same way: CREATE then one APPEND.
    seen.clear()
    _write(webhdfs, f"{root}/small", b"x")
    assert seen == [0]


def test_rename_onto_an_existing_file_answers_false_and_leaves_both_files(webhdfs: WebHDFS, root: str) -> None:
    """The create-only publish: write a temporary name, rename it onto the final one."""
    _write(webhdfs, f"{root}/tmp", b"new")
    _write(webhdfs, f"{root}/final", b"old")
    refused = _rename(webhdfs, f"{root}/tmp", f"{root}/final")
    assert (refused.status_code, refused.json()) == (200, {"boolean": False})
    assert (webhdfs.cat_file(f"{root}/tmp"), webhdfs.cat_file(f"{root}/final")) == (b"new", b"old")
    # fsspec's mv drops the answer: it returns as if it had moved the file.
    assert webhdfs.mv(f"{root}/tmp", f"{root}/final") is None
    assert webhdfs.exists(f"{root}/tmp") and webhdfs.cat_file(f"{root}/final") == b"old"
    # renameoptions=NONE asks for the same with an error instead of false.
    with pytest.raises(RuntimeError, match="rename destination .*final already exists"):
        _rename(webhdfs, f"{root}/tmp", f"{root}/final", renameoptions="NONE")
    published = _rename(webhdfs, f"{root}/tmp", f"{root}/other")
    assert published.json() == {"boolean": True} and not webhdfs.exists(f"{root}/tmp")
    # An absent source or an absent parent of the destination: false as well, nothing raised.
    assert _rename(webhdfs, f"{root}/absent", f"{root}/x").json() == {"boolean": False}
    assert _rename(webhdfs, f"{root}/other", f"{root}/no/such/dir/x").json() == {"boolean": False}
    assert webhdfs.exists(f"{root}/other")


def test_rename_with_overwrite_replaces_the_destination_file_and_answers_an_empty_body(
    webhdfs: WebHDFS, root: str
) -> None:
    _write(webhdfs, f"{root}/tmp", b"new")
    _write(webhdfs, f"{root}/final", b"old")
    replaced = _rename(webhdfs, f"{root}/tmp", f"{root}/final", renameoptions="OVERWRITE")
    assert (replaced.status_code, replaced.content, replaced.headers["Content-Type"]) == (
        200, b"", "application/octet-stream")
    assert webhdfs.cat_file(f"{root}/final") == b"new" and not webhdfs.exists(f"{root}/tmp")
    with pytest.raises(FileNotFoundError, match="rename source .*tmp is not found"):
        _rename(webhdfs, f"{root}/tmp", f"{root}/final", renameoptions="OVERWRITE")
    webhdfs.mkdir(f"{root}/dir/inner")
    with pytest.raises(RuntimeError, match="must both be directories"):
        _rename(webhdfs, f"{root}/final", f"{root}/dir", renameoptions="OVERWRITE")


def test_rename_with_overwrite_never_shows_a_concurrent_reader_the_name_missing_or_half_written(
    hdfs: stack_mod.HdfsCluster, webhdfs: WebHDFS, root: str
) -> None:
    """One NameNode operation (rename2 with OVERWRITE) replaces the file: a reader polling the
    name (OPEN, followed to the DataNode) while it is replaced 30 times only ever reads a whole
    version. Evidence on one machine, not a proof."""
    _write(webhdfs, f"{root}/final", b"version-0")
    reader = WebHDFS("127.0.0.1", port=hdfs.http_port, user="streamstate", skip_instance_cache=True)
    stop, reads, errors = threading.Event(), [], []

    def poll() -> None:
        while not stop.is_set():
            try:
                reads.append(reader._call("OPEN", path=f"{root}/final").content)  # noqa: SLF001
            except Exception as exc:  # noqa: BLE001 - asserted below
                errors.append(repr(exc))

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        for i in range(1, 31):
            _write(webhdfs, f"{root}/tmp-{i}", f"version-{i}".encode())
            assert _rename(webhdfs, f"{root}/tmp-{i}", f"{root}/final", renameoptions="OVERWRITE").ok
    finally:
        stop.set()
        thread.join(60)
    assert errors == [] and len(reads) > 30, (errors, len(reads))
    assert set(reads) <= {f"version-{i}".encode() for i in range(31)}
    assert webhdfs.cat_file(f"{root}/final") == b"version-30" and webhdfs.ls(root) == [f"{root}/final"]


def test_a_directory_renamed_onto_an_existing_directory_lands_inside_it(webhdfs: WebHDFS, root: str) -> None:
    _write(webhdfs, f"{root}/src/sub/f", b"f")
    assert _rename(webhdfs, f"{root}/src", f"{root}/moved").json() == {"boolean": True}
    assert webhdfs.find(root) == [f"{root}/moved/sub/f"]
    webhdfs.mkdir(f"{root}/empty")
    assert _rename(webhdfs, f"{root}/moved", f"{root}/empty").json() == {"boolean": True}
    assert webhdfs.find(root) == [f"{root}/empty/moved/sub/f"]
    _write(webhdfs, f"{root}/full/x", b"x")
    webhdfs.mkdir(f"{root}/src2/y")
    assert _rename(webhdfs, f"{root}/src2", f"{root}/full").json() == {"boolean": True}
    assert set(webhdfs.find(f"{root}/full", withdirs=True)) == {
        f"{root}/full", f"{root}/full/x", f"{root}/full/src2", f"{root}/full/src2/y"}
    # A file renamed onto a directory lands inside it too.
    _write(webhdfs, f"{root}/file", b"z")
    assert _rename(webhdfs, f"{root}/file", f"{root}/full").json() == {"boolean": True}
    assert webhdfs.cat_file(f"{root}/full/file") == b"z"


def test_rename_with_overwrite_replaces_an_empty_directory_and_refuses_a_non_empty_one(
    webhdfs: WebHDFS, root: str
) -> None:
    webhdfs.mkdir(f"{root}/src/z")
    webhdfs.mkdir(f"{root}/empty")
    _write(webhdfs, f"{root}/full/q", b"q")
    assert _rename(webhdfs, f"{root}/src", f"{root}/empty", renameoptions="OVERWRITE").content == b""
    assert webhdfs.find(f"{root}/empty", withdirs=True) == [f"{root}/empty", f"{root}/empty/z"]
    with pytest.raises(RuntimeError, match="rename destination directory is not empty"):
        _rename(webhdfs, f"{root}/empty", f"{root}/full", renameoptions="OVERWRITE")
    assert webhdfs.cat_file(f"{root}/full/q") == b"q" and webhdfs.exists(f"{root}/empty/z")


def test_delete_mkdirs_and_the_file_checksum(webhdfs: WebHDFS, root: str) -> None:
    def call(op: str, method: str, path: str, **params: str) -> Any:
        return webhdfs._call(op, method=method, path=path, **params).json()  # noqa: SLF001

    assert call("MKDIRS", "put", f"{root}/a/b/c") == {"boolean": True}  # parents made
    assert call("MKDIRS", "put", f"{root}/a/b/c") == {"boolean": True}  # already there: true too
    _write(webhdfs, f"{root}/a/b/c/f", b"hello")
    assert call("DELETE", "delete", f"{root}/absent", recursive="true") == {"boolean": False}
    assert webhdfs.rm(f"{root}/absent") is None  # fsspec: nothing raised
    with pytest.raises(RuntimeError, match="is non empty': Directory is not empty"):
        call("DELETE", "delete", f"{root}/a", recursive="false")
    # GETFILECHECKSUM (redirected to the DataNode): HDFS's own composite checksum.
    checksum = webhdfs.ukey(f"{root}/a/b/c/f")
    assert checksum["algorithm"] == "MD5-of-0MD5-of-512CRC32C" and checksum["length"] == 28
    _write(webhdfs, f"{root}/same", b"hello")
    _write(webhdfs, f"{root}/other", b"hellO")
    assert webhdfs.ukey(f"{root}/same") == checksum != webhdfs.ukey(f"{root}/other")
    data = bytes(range(256)) * 40
    _write(webhdfs, f"{root}/ten-k", data)
    assert webhdfs.ukey(f"{root}/ten-k")["bytes"] == _hdfs_checksum_bytes(data)
    _write(webhdfs, f"{root}/empty", b"")
    assert webhdfs.ukey(f"{root}/empty") == {"algorithm": "MD5-of-0MD5-of-0CRC32", "length": 28,
                                             "bytes": "00000000" + "00" * 8 + hashlib.md5(bytes(32)).hexdigest()
                                             + "00000000"}
    assert call("DELETE", "delete", f"{root}/a", recursive="true") == {"boolean": True}
    assert not webhdfs.exists(f"{root}/a")


def test_absent_paths_raise_file_not_found_and_refused_operations_raise_runtime_or_value_error(
    webhdfs: WebHDFS, root: str
) -> None:
    absent = f"{root}/absent"
    for read in (webhdfs.info, webhdfs.ls, webhdfs.cat_file, webhdfs.ukey):
        with pytest.raises(FileNotFoundError):
            read(absent)
    with pytest.raises(FileNotFoundError, match="File does not exist"):
        webhdfs.open(absent, "rb")
    assert webhdfs.exists(absent) is False
    _write(webhdfs, f"{root}/file", b"x")
    webhdfs.mkdir(f"{root}/dir")
    # A directory opened for reading: fsspec sees length 0 and reads nothing, without asking.
    assert webhdfs.cat_file(f"{root}/dir") == b""
    with pytest.raises(FileNotFoundError, match="Path is not a file"):
        webhdfs._call("OPEN", path=f"{root}/dir")  # noqa: SLF001
    # FileAlreadyExistsException and ParentNotDirectoryException: fsspec knows neither.
    with pytest.raises(RuntimeError, match="Path is not a directory"):
        webhdfs.mkdir(f"{root}/file")
    with pytest.raises(RuntimeError, match="is not a directory"):
        webhdfs.mkdir(f"{root}/file/below")
    with pytest.raises(ValueError, match="is not an absolute path"):
        _rename(webhdfs, f"{root}/file", "relative")
    with pytest.raises(ValueError, match="is not a valid GET operation"):
        webhdfs._call("NOSUCHOP", path=root)  # noqa: SLF001
    raw = requests.get(f"{webhdfs.url}{absent}", params={"op": "GETFILESTATUS"}, timeout=10)
    assert raw.status_code == 404 and raw.json()["RemoteException"]["exception"] == "FileNotFoundException"


def test_hdfs_refuses_a_colon_in_a_name_and_takes_the_other_characters_a_store_key_may_hold(
    webhdfs: WebHDFS, root: str
) -> None:
    """HDFS's own rule (DFSUtil.isValidName), not WebHDFS's: InvalidPathException, HTTP 400,
    which fsspec raises as RuntimeError; GETFILESTATUS just finds no such file."""
    for name in ("with space", "pct%41", "eq=1", "q?x", "hash#x", "ünï", "plus+x", "semi;x", ".hidden", "a..b"):
        _write(webhdfs, f"{root}/{name}", name.encode())
        assert webhdfs.cat_file(f"{root}/{name}") == name.encode()
        assert f"{root}/{name}" in webhdfs.ls(root)
    with pytest.raises(RuntimeError, match="Invalid path name"):
        _write(webhdfs, f"{root}/2026-11-27T04:37:00Z", b"x")
    with pytest.raises(RuntimeError, match="Invalid path name"):
        webhdfs.mkdir(f"{root}/a:b")
    with pytest.raises(RuntimeError, match="Invalid path name"):
        _rename(webhdfs, f"{root}/eq=1", f"{root}/a:b")
    assert webhdfs.exists(f"{root}/a:b") is False
    raw = requests.put(f"{webhdfs.url}{root}/a:b", params={"op": "MKDIRS"}, timeout=10)
    assert raw.status_code == 400 and raw.json()["RemoteException"]["exception"] == "InvalidPathException"


def test_create_without_overwrite_is_refused_at_the_datanode_when_the_file_exists(
    webhdfs: WebHDFS, root: str
) -> None:
    """A create-only write in one request (fsspec itself always creates with overwrite=true):
    the NameNode redirects without looking, the DataNode refuses (403)."""
    created = webhdfs._call("CREATE", method="put", path=f"{root}/once", data=b"first", overwrite="false")  # noqa: SLF001
    assert created.status_code == 201 and webhdfs.cat_file(f"{root}/once") == b"first"
    with pytest.raises(RuntimeError, match="already exists"):
        webhdfs._call("CREATE", method="put", path=f"{root}/once", data=b"second", overwrite="false")  # noqa: SLF001
    assert webhdfs.cat_file(f"{root}/once") == b"first"


def test_webhdfs_redirects_reads_and_writes_to_the_datanode_on_loopback_reachable_as_is(
    hdfs: stack_mod.HdfsCluster, webhdfs: WebHDFS, root: str
) -> None:
    _write(webhdfs, f"{root}/f", b"data")
    for op, method in (("OPEN", "get"), ("GETFILECHECKSUM", "get"), ("APPEND", "post"), ("CREATE", "put")):
        out = webhdfs._call(op, method=method, path=f"{root}/f", redirect=False)  # noqa: SLF001
        assert out.status_code == 307
        location = out.headers["Location"]
        assert location.startswith(f"{hdfs.datanode_http}/webhdfs/v1{root}/f?op={op}&"), location
        assert f"namenoderpcaddress=127.0.0.1:{hdfs.rpc_port}" in location
    with requests.get(webhdfs._call("OPEN", path=f"{root}/f", redirect=False).headers["Location"],  # noqa: SLF001
                      timeout=10) as r:
        assert r.content == b"data"


def test_hdfs_killed_and_restarted_keeps_its_data_on_the_same_ports_and_formats_only_the_first_time(
    tmp_path: Path,
) -> None:
    """Its own HDFS (the session's stays up): SIGKILL, as a lost host; then `restart hdfs`."""
    state_dir = tmp_path / "stack"
    started = time.monotonic()
    first = stack_mod.start_hdfs(state_dir)
    first_s = time.monotonic() - started
    try:
        assert json.loads((Path(first.conf_dir) / "hdfs-cluster.json").read_text())["formatted"] is True
        assert stack_mod.start_hdfs(state_dir) == first  # running: the same one back, nothing started
        fs = WebHDFS("127.0.0.1", port=first.http_port, user="streamstate", skip_instance_cache=True)
        _write(fs, "/kept/a", b"a" * 100_000)
        assert _rename(fs, "/kept/a", "/kept/b").json() == {"boolean": True}
        fs.mkdir("/kept/dir")
        rss = _rss_mb(_pid(first))
        stack_mod.kill_part(state_dir, "hdfs")
        assert "hdfs" not in stack_mod.status(state_dir)["parts"]  # killed: no pid file left
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{first.webhdfs_url}/webhdfs/v1/?op=GETFILESTATUS", timeout=5)
        started = time.monotonic()
        stack_mod.restart_part(state_dir, "hdfs")
        restart_s = time.monotonic() - started
        again = stack_mod.start_hdfs(state_dir)
        assert again == first  # the same ports, the same directories
        assert json.loads((Path(again.conf_dir) / "hdfs-cluster.json").read_text())["formatted"] is False
        assert fs.cat_file("/kept/b") == b"a" * 100_000 and fs.isdir("/kept/dir") and not fs.exists("/kept/a")
        stack_mod.stop_hdfs(state_dir)  # SIGTERM: a clean stop
        started = time.monotonic()
        assert stack_mod.start_hdfs(state_dir) == first
        start_after_stop_s = time.monotonic() - started
        assert fs.cat_file("/kept/b") == b"a" * 100_000
        with pytest.raises(stack_mod.StackError, match="is running"):
            stack_mod.restart_part(state_dir, "hdfs")
    finally:
        stack_mod.down(state_dir)
    assert not (state_dir / "hdfs-data").exists() and not (state_dir / "hdfs.json").exists()
    print(f"\nHDFS: first start (format) {first_s:.1f}s, restart after SIGKILL {restart_s:.1f}s, "
          f"start after SIGTERM {start_after_stop_s:.1f}s; JVM RSS {rss:.0f} MB")
