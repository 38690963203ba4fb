"""A standalone Spark cluster on localhost, started from the scripts of the pyspark wheel.

The wheel ships ``bin/spark-class`` and the jars, but not ``sbin/start-master.sh`` or
``start-worker.sh`` (only ``spark-daemon.sh``, which needs ``ps`` from procps, absent on a
slim Debian). So the master and the worker are started here the way those scripts end up
starting them: ``spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``,
each in its own process group, stopped with it. Everything listens on 127.0.0.1 (RPC, web
UIs, the driver); logs, work and scratch folders are under one temporary folder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
QUICK_JVM = "-XX:TieredStopAtLevel=1"  # for JVMs that live about a minute (driver_env)
# Spark settings of the caller's shell, which would configure the daemons or the driver
# behind our back
_SPARK_SETTINGS = ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS", "SPARK_MASTER_OPTS",
                   "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARKCQ_MASTER")
# and the daemons' executors get their Python path from the application (spark.executorEnv,
# addPyFile), as on a real cluster, not from whoever started the worker
_NOT_FOR_DAEMONS = ("PYTHONPATH", *_SPARK_SETTINGS)


@dataclass
class LocalCluster:
    """A running master and one worker; ``url`` is the master's ``spark://`` URL."""

    url: str
    root: Path
    work_dir: Path  # SPARK_WORKER_DIR: one app-* folder per application, executor logs inside
    shared_dir: Path  # a folder the driver and every executor see (e.g. a checkpoint_dir)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def driver_env(self, conf: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for a driver process: this wheel's Spark, and a ``spark-defaults.conf``
        that puts the driver on loopback (where the executors reach it) plus ``conf``.
        """
        conf_dir = self.root / "driver-conf"
        conf_dir.mkdir(exist_ok=True)
        defaults = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                    "spark.local.dir": str(self.root / "driver-local"),
                    # JVMs that live a minute: C1 code only. C2's compilations never pay
                    # back in such a run; without them the test takes half the CPU (Java
                    # 30 s instead of 59 s) on a busy machine
                    "spark.driver.extraJavaOptions": QUICK_JVM,
                    "spark.executor.extraJavaOptions": QUICK_JVM,
                    **(conf or {})}
        (conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in defaults.items()))
        environ = {k: v for k, v in os.environ.items() if k not in _SPARK_SETTINGS}
        return {**environ, "SPARK_HOME": SPARK_HOME, "SPARK_CONF_DIR": str(conf_dir),
                "SPARKCQ_DRIVER_MEMORY": "1g"}

    def logs(self, chars: int = 3000) -> str:
        """The ends of the daemons' logs and of every executor's stderr, for failure messages."""
        files = sorted(self.root.glob("logs/*.log")) + sorted(self.work_dir.glob("*/*/stderr"))
        return "\n".join(f"== {f}\n{f.read_text(errors='replace')[-chars:]}" for f in files)

    def stop(self) -> None:
        """Stop the worker (and with it its executors), then the master; kill what lingers."""
        for proc in reversed(self.procs):
            _stop_group(proc)
        self.procs.clear()


def start_local_cluster(root: Path, cores: int = 1, memory: str = "1g",
                        timeout: float = 90) -> LocalCluster:
    """Start a master and a worker of ``cores`` and ``memory`` under ``root``; wait until the
    worker has registered. On any failure what was started is stopped again.
    """
    folders = {name: root / name for name in ("logs", "pids", "work", "local", "shared",
                                              "daemon-conf")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in _NOT_FOR_DAEMONS}
    environ.update(
        SPARK_HOME=SPARK_HOME,
        SPARK_CONF_DIR=str(folders["daemon-conf"]),  # empty: no stray spark-defaults.conf
        SPARK_LOCAL_IP="127.0.0.1",  # RPC and web UIs bind loopback, not 0.0.0.0
        SPARK_LOG_DIR=str(folders["logs"]),
        SPARK_PID_DIR=str(folders["pids"]),
        SPARK_WORKER_DIR=str(folders["work"]),
        SPARK_LOCAL_DIRS=str(folders["local"]),  # executors' shuffle and scratch files
        SPARK_DAEMON_MEMORY="512m",
        SPARK_DAEMON_JAVA_OPTS=f"{QUICK_JVM} -XX:+UseSerialGC",  # mostly idle
        # Spark 4 starts the master's REST submission server on the fixed port 6066
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    cluster = LocalCluster("", root, folders["work"], folders["shared"])
    spark_class = os.path.join(SPARK_HOME, "bin", "spark-class")
    try:
        # port 0: the master picks a free port and says which in its log, so no other
        # process can take it between our choosing and its binding
        master = _start(cluster, "master", environ, spark_class, MASTER_CLASS,
                        "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        found = _wait_for_log(cluster, master, "master", r"Starting Spark master at (spark://\S+)",
                              timeout)
        cluster.url = found.group(1)
        worker = _start(cluster, "worker", environ, spark_class, WORKER_CLASS, cluster.url,
                        "--host", "127.0.0.1", "--webui-port", "0", "--cores", str(cores),
                        "--memory", memory, "--work-dir", str(folders["work"]))
        _wait_for_log(cluster, worker, "worker", r"Successfully registered with master",
                      timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start(cluster: LocalCluster, name: str, environ: dict[str, str], *command: str
           ) -> subprocess.Popen:
    log = open(cluster.root / "logs" / f"{name}.log", "w")  # noqa: SIM115 - the child's
    with log:
        # a new session: stopping the process group stops the JVM and, for the worker, the
        # executors it forks, and nothing else
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environ,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    cluster.procs.append(proc)
    (cluster.root / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc


def _wait_for_log(cluster: LocalCluster, proc: subprocess.Popen, name: str, pattern: str,
                  timeout: float) -> re.Match[str]:
    path = cluster.root / "logs" / f"{name}.log"
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(pattern, path.read_text(errors="replace"))
        if found:
            return found
        if proc.poll() is not None or time.monotonic() > deadline:
            state = "exited" if proc.poll() is not None else f"not ready in {timeout:.0f} s"
            msg = f"spark {name} {state}:\n{cluster.logs()}"
            raise RuntimeError(msg)
        time.sleep(0.2)


def _stop_group(proc: subprocess.Popen, grace: float = 20) -> None:
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    # executors and their Python workers are in the group too and may outlive the JVM
    _signal_group(proc, signal.SIGKILL)
    proc.wait(30)


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
