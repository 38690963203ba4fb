"""An archive of the JVM classes a Spark session loads, so a new session starts sooner.

A JVM reads, parses and verifies each class it loads: a new Spark session loads about
16,000 of them by the end of its first query, most from Spark's jars, which is most of the
7 s a session takes to start on two cores. The JVM can map classes it archived at the end
of an earlier run instead (Java's class data sharing, ``-XX:ArchiveClassesAtExit`` then
``-XX:SharedArchiveFile``): the session starts in about 4.4 s and its first Spark job
takes 1.2 s instead of 2.2 s (12,700 classes come from the archive).

``sparkcq class-archive`` builds the archive once for this Java and these Spark jars
(``make test`` does, as the suite starts about twenty JVMs), by running a first query in a
JVM of its own and keeping what that JVM loaded (about 160 MB, in 25-35 s). A session then
starts with it (``make_session``) whenever one exists for its Java and jars: the archive's
name holds a digest of both, and the JVM checks them again and, on any mismatch (another
heap size class, say), loads the classes from the jars as usual, silently.
``SPARKCQ_CLASS_ARCHIVE=off`` starts sessions without it; archives live in
``SPARKCQ_CACHE_DIR`` (``~/.cache/sparkcq`` by default).

    $ sparkcq class-archive
    built /root/.cache/sparkcq/spark-classes-047090a4406596ee.jsa (160 MB) in 27 s
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

from sparkcq.errors import SparkcqError

# the JVM's notes while it archives (classes it skips: signed jars, generated classes)
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


# the child process that archives the classes its JVM loads: a session made as every
# other (the heap's size decides how the JVM addresses objects, and an archive serves only
# JVMs that address them alike), its JVM started with the options in ``sys.argv[1]``
_DUMP = ("import sys; from sparkcq.class_archive import dump; "
         "from sparkcq.session import make_session; "
         "dump(make_session('local[2]', app_name='sparkcq-class-archive', "
         "conf={'spark.driver.extraJavaOptions': sys.argv[1]}))")


class ClassArchiveError(SparkcqError, RuntimeError):
    """The class archive could not be built (sessions start without it)."""


def archive_path() -> Path | None:
    """Where the archive for this Java and these Spark jars is (or would be); None when
    there is no Java to start.
    """
    java = _java()
    if java is None:
        return None
    # the JVM maps an archive only for the class path it was built with, jar by jar (its
    # path, size and time of change): an installation of the same Spark elsewhere, or a
    # copy of this one, needs an archive of its own
    folder = _spark_jars().resolve()
    jars = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.glob("*.jar"))
    key = repr((str(java), java.stat().st_mtime_ns, pyspark.__version__, str(folder), jars))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return _cache_dir() / f"spark-classes-{digest}.jsa"


def java_options() -> str:
    """The JVM options that start a session from the archive, or "" without one (or with
    ``SPARKCQ_CLASS_ARCHIVE=off``).
    """
    if os.environ.get("SPARKCQ_CLASS_ARCHIVE", "on") == "off":
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path}"


def ensure_archive(force: bool = False) -> tuple[Path, bool]:
    """Build the archive unless it exists (or ``force``); returns its path and whether it
    was built now.

    The classes are archived by a JVM of its own, which writes them as it exits: a child
    Python process runs the work, closes its JVM and waits for it to end; the archive is
    then moved into place whole, so a session never maps a half-written file.
    """
    path = archive_path()
    if path is None:
        msg = "no Java to start: install Java 17 or newer (or set JAVA_HOME)"
        raise ClassArchiveError(msg)
    if path.is_file() and not force:
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    options = f"-XX:ArchiveClassesAtExit={tmp} {_QUIET}"
    try:
        done = subprocess.run([sys.executable, "-c", _DUMP, options], capture_output=True,
                              text=True, timeout=600, check=False,
                              env={**os.environ, "SPARKCQ_CLASS_ARCHIVE": "off"})
        if done.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            msg = f"the JVM archived no classes (exit code {done.returncode}):\n{tail}"
            raise ClassArchiveError(msg)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path, True


def dump(spark: SparkSession) -> None:
    """Run a first query on a new session whose JVM archives its classes as it exits, and
    wait for the JVM to exit.
    """
    _work(spark)
    gateway = SparkContext._gateway
    spark.stop()
    assert gateway is not None
    gateway.shutdown()
    # the JVM exits when the pipe to its standard input closes, and archives as it does
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=300)


def _work(spark: SparkSession) -> None:
    """A first query: parsing, analysis, planning, generated code, a local checkpoint and
    rows handed to Python through Arrow. What a session loads to start and run it is most
    of what it loads at all, and the archive's size (and the time the JVM takes to write
    it) grows with every class more.
    """
    spark.range(100).selectExpr("id % 7 AS k", "id AS v").createOrReplaceTempView("w")
    spark.sql("SELECT a.k, sum(a.v), max(b.v) OVER (PARTITION BY a.k) FROM w a "
              "JOIN w b ON a.k = b.k GROUP BY a.k, b.v").localCheckpoint(eager=False).toArrow()


def _java() -> Path | None:
    """The Java a new session runs on (as Spark's launcher picks it)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def _spark_jars() -> Path:
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    return Path(home) / "jars"


def _cache_dir() -> Path:
    explicit = os.environ.get("SPARKCQ_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparkcq"


def build(force: bool = False) -> str:
    """``sparkcq class-archive``: build the archive if it is missing; what was done."""
    started = time.perf_counter()
    path, built = ensure_archive(force)
    if not built:
        return f"{path} is up to date"
    size = path.stat().st_size / 1e6
    return f"built {path} ({size:.0f} MB) in {time.perf_counter() - started:.0f} s"
