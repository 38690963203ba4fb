"""The Spark session sparkcq runs on: embedded local[*] unless told otherwise."""

from __future__ import annotations

import os
import sys

from pyspark import SparkContext
from pyspark.sql import SparkSession

from sparkcq.class_archive import java_options
from sparkcq.errors import ExecutionError
from sparkcq.gateway import fewer_round_trips


def default_master() -> str:
    """``SPARKCQ_MASTER`` if set, else embedded ``local[*]``."""
    return os.environ.get("SPARKCQ_MASTER", "local[*]")


# JDBC drivers Spark's JDBC reader needs (PostgreSQL tables): added to ``spark.jars`` when
# present (Debian's libpostgresql-jdbc-java puts the PostgreSQL driver here)
JDBC_JARS = ("/usr/share/java/postgresql.jar",)


def jdbc_jars() -> list[str]:
    """The JDBC driver jars a new session loads: those of ``JDBC_JARS`` that exist, then
    the comma-separated paths of ``SPARKCQ_JDBC_JARS`` (which adds drivers, or the
    PostgreSQL driver from elsewhere); each once.
    """
    found = [p for p in JDBC_JARS if os.path.exists(p)]
    extra = [p.strip() for p in os.environ.get("SPARKCQ_JDBC_JARS", "").split(",") if p.strip()]
    return list(dict.fromkeys([*found, *extra]))


# the Spark conf holding the number of partitions of a large cycle: the session's
# ``spark.sql.shuffle.partitions`` changes from cycle to cycle (1 in a small one), so it
# cannot tell it again (``runtime/partitioning.py``)
CONFIGURED_PARTITIONS = "spark.sparkcq.partitions"


def configured_partitions(spark: SparkSession) -> int:
    """The partitions of a large cycle on ``spark``: as the session was made, or its
    shuffle partitions when sparkcq first sees a session made elsewhere.
    """
    value = spark.conf.get(CONFIGURED_PARTITIONS, None)
    if value is None:
        value = spark.conf.get("spark.sql.shuffle.partitions") or "4"
        spark.conf.set(CONFIGURED_PARTITIONS, value)
    return int(value)


def make_session(master: str | None = None, app_name: str = "sparkcq",
                 shuffle_partitions: int = 4, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the Spark session: quiet logs, few shuffle partitions, Arrow on, UI off.

    Cycles are small batches, so few shuffle partitions and no adaptive re-planning keep the
    per-job overhead (which dominates a cycle) low. Every cycle runs the same operator plans
    again, so the cache of compiled generated code must hold all of them: with Spark's
    default of 100 entries a single query's cycle already recompiled ~60 classes (measured
    with ``CodegenMetrics``); with room for all, only plans with new literals compile.
    JDBC drivers (``jdbc_jars``) are on its class path, for PostgreSQL tables; jars take
    effect only in a session this call starts (not in one already running).
    """
    ensure_one_master(master)
    # Python workers (user functions, aggregates) run the driver's interpreter, so they see
    # the same packages (pyarrow, pandas) as the driver, whatever `python3` on PATH is
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master or default_master())
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config(CONFIGURED_PARTITIONS, str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.codegen.cache.maxEntries", "10000")
        # the generated class of a whole-stage code generation stage is named after the
        # stage's number in its plan, which shifts as a cycle's plan holds more or fewer
        # operators: the same stage then misses the cache and compiles again. Unnumbered,
        # the partitioned joins property compiled 908 classes instead of 1,781 (2026-12-01)
        .config("spark.sql.codegen.useIdInClassName", "false")
        # a file counts as 1 MB more than its size when files are packed into splits (4 MB
        # by default), so a cycle's file of a few MB is read by every core, not by one task
        .config("spark.sql.files.openCostInBytes", str(1 << 20))
        # an aggregate partitions all its frames by a hash of its group keys and joins on
        # it plus null-safe keys (operators/multiset.py): co-partitioned on that hash alone,
        # its joins need no shuffle
        .config("spark.sql.requireAllClusterKeysForCoPartition", "false")
        # a cycle's plan can hold aggregates over different frames (a shedding join's
        # tally in the commit; the per-state summaries it grouped before they were observed
        # metrics); Spark 4.3 merges such subplans into scalar subqueries that run as Spark
        # jobs of their own before the commit's: a cycle is one job without it
        .config("spark.sql.optimizer.excludedRules",
                "org.apache.spark.sql.execution.planmerging.MergeSubplans")
        .config("spark.driver.memory", os.environ.get("SPARKCQ_DRIVER_MEMORY", "2g"))
        # a source's Arrow batch of up to 48 MB became a local relation: the driver turned
        # it into rows, and the cycle that kept it copied them again and sent them out in
        # its tasks (a batch of 20,000 rows: 300 ms of driver time, 60 ms after, another
        # Spark job running beside, 2026-12-05); above 256 kB the batches go to the tasks
        # as they are, which turn them into rows themselves
        .config("spark.sql.execution.arrow.localRelationThreshold", str(256 << 10))
        # a small cycle runs in one task (runtime/partitioning.py) that holds every sort and
        # hash table of its plan until it ends, those a join stopped reading included; each
        # takes at least a page, by default 1/16 of a core's share of memory (32 MB with 2 GB
        # on 2 cores): thirty of them exhausted the memory of a cycle over a few rows
        .config("spark.buffer.pageSize", "2m")
        # PySpark 4 records the Python call site of every DataFrame and Column call for
        # Spark's error messages: three to four extra JVM round trips per call, a few hundred
        # per cycle; sparkcq's errors name the query and operator themselves
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # every frame a cycle caches or keeps is optimised on its own, a hundred in a cycle
        # of a dozen queries: constraint propagation (the filters Spark infers from the
        # predicates and aliases below each operator) made each optimisation about 1.5x
        # dearer and pruned or inferred nothing in these plans (measured: the demo's cycle
        # 8-13% faster without it, the same results)
        .config("spark.sql.constraintPropagation.enabled", "false")
    )
    if (master or default_master()).startswith("local"):
        # nothing outside this machine talks to an embedded Spark: its driver RPC and block
        # manager ports listen on loopback only
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    conf = dict(conf or {})
    jars = [*(j for j in conf.pop("spark.jars", "").split(",") if j), *jdbc_jars()]
    if jars:
        builder = builder.config("spark.jars", ",".join(dict.fromkeys(jars)))
    # the JVM maps the classes archived for this Java and these jars, if there is an
    # archive (``class_archive.py``): a new session starts in about 4 s instead of 7
    archive = java_options()
    if archive:
        conf["spark.driver.extraJavaOptions"] = " ".join(
            o for o in (conf.get("spark.driver.extraJavaOptions", ""), archive) if o)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_metric_updates(spark)
    fewer_round_trips(spark)
    return spark


def ensure_one_master(master: str | None) -> None:
    """Refuse a master other than the one this process's SparkContext already runs on.

    A process holds one SparkContext, and ``getOrCreate`` would hand back the running one
    whatever master was asked for: ``Engine(master='spark://...')`` after a local session
    would silently run locally.
    """
    active = SparkContext._active_spark_context
    if master is None or active is None or active.master == master:
        return
    msg = (f"this process already runs Spark on {active.master!r}, so it cannot also use "
           f"master {master!r} (a process holds one SparkContext): stop that session first, "
           "pass it as Engine(spark=...), or run sparkcq in a process of its own")
    raise ExecutionError(msg)


def _quiet_metric_updates(spark: SparkSession) -> None:
    """Silence 'Failed to update accumulator' logs.

    Cycle intermediates are local checkpoints computed by the cycle's single commit job,
    after the Python objects of the plans that created them (and so their SQL metrics) may
    be gone; the scheduler then logs each metric update it cannot deliver. The data is
    unaffected and job failures still raise in the driver.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    level = jvm.org.apache.logging.log4j.Level.FATAL
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.scheduler.DAGScheduler", level)


def spark_alive(spark: SparkSession) -> bool:
    """Whether the session's JVM still answers and its context is not stopped."""
    try:
        jsc = spark.sparkContext._jsc
        return jsc is not None and not jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - a dead gateway fails in many ways
        return False
