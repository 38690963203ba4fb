"""The class archive (sparkcq/class_archive.py): sessions start from it when it exists for
their Java and Spark jars, and the one ``make test`` built is one a JVM can map."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sparkcq import class_archive

# a session that must map the archive: -Xshare:on makes the JVM refuse to start otherwise
_STRICT = """
import sys
from sparkcq.session import make_session
spark = make_session("local[1]", conf={"spark.driver.extraJavaOptions": "-Xshare:on"})
print(spark.range(5).selectExpr("sum(id)").first()[0])
"""


def test_sessions_take_the_archive_of_their_java_and_jars_only_when_it_exists(
        tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKCQ_CACHE_DIR", str(tmp_path))
    path = class_archive.archive_path()
    assert path is not None and path.parent == tmp_path
    assert path.name.startswith("spark-classes-") and path.suffix == ".jsa"
    assert class_archive.java_options() == ""
    path.write_bytes(b"archived classes")
    assert class_archive.java_options() == f"-XX:SharedArchiveFile={path}"
    monkeypatch.setenv("SPARKCQ_CLASS_ARCHIVE", "off")
    assert class_archive.java_options() == ""
    # the same Spark installed elsewhere (the same jars in another folder): another archive
    monkeypatch.delenv("SPARKCQ_CLASS_ARCHIVE")
    home = class_archive._spark_jars().parent
    elsewhere = tmp_path / "spark-home"
    (elsewhere / "jars").mkdir(parents=True)
    for jar in (home / "jars").glob("*.jar"):
        (elsewhere / "jars" / jar.name).symlink_to(jar)
    monkeypatch.setenv("SPARK_HOME", str(elsewhere))
    assert class_archive.archive_path() not in (None, path)
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert class_archive.archive_path() == path
    # another Java: another archive
    other = tmp_path / "java-home"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(other))
    assert class_archive.archive_path() not in (None, path)
    assert class_archive.java_options() == ""


def test_the_built_archive_is_mapped_by_a_new_session():
    if not class_archive.java_options():
        if os.environ.get("CI") == "true":
            pytest.fail("no class archive: `make test` builds it (sparkcq class-archive)")
        pytest.skip("no class archive: `sparkcq class-archive` builds it")
    # the session adds the archive to -Xshare:on; a JVM that cannot map it does not start
    done = subprocess.run([sys.executable, "-c", _STRICT], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "10"
