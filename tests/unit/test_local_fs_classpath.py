"""The forkless local filesystem's jar on SPARK_DIST_CLASSPATH (dev/local_fs.py): appended
once after what is there, taken off alone, nothing added when it is not built."""

from __future__ import annotations

import os
from pathlib import Path

from dev import local_fs


def test_the_jar_is_appended_once_after_what_the_classpath_holds(tmp_path: Path) -> None:
    jar = tmp_path / "fs.jar"
    jar.write_bytes(b"")
    platform = os.pathsep.join(["/opt/hadoop/a.jar", "/opt/hadoop/b.jar"])
    assert local_fs.with_local_fs(None, jar) == str(jar)
    assert local_fs.with_local_fs(platform, jar) == os.pathsep.join([platform, str(jar)])
    assert local_fs.with_local_fs(local_fs.with_local_fs(platform, jar), jar) == os.pathsep.join([platform, str(jar)])


def test_a_jar_not_built_adds_nothing(tmp_path: Path) -> None:
    assert local_fs.with_local_fs(None, tmp_path / "missing.jar") is None
    assert local_fs.with_local_fs("/opt/hadoop/a.jar", tmp_path / "missing.jar") == "/opt/hadoop/a.jar"


def test_hadoops_own_takes_the_jar_off_and_keeps_the_rest() -> None:
    jar = str(local_fs.LOCAL_FS_JAR)
    assert local_fs.ENV not in local_fs.hadoops_own({local_fs.ENV: jar, "PATH": "/bin"})
    assert local_fs.hadoops_own({local_fs.ENV: os.pathsep.join(["/opt/a.jar", jar])})[local_fs.ENV] == "/opt/a.jar"
    assert local_fs.hadoops_own({"PATH": "/bin"}) == {"PATH": "/bin"}
