"""`sparkcq serve` in a subprocess, for tests that drive the service over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from cluster import QUICK_JVM

from sparkcq.server.client import Client, ServerError

TESTS = os.path.dirname(__file__)  # where the user aggregates in udas.py live


def short_lived_jvm() -> dict[str, str]:
    """Environment for a process whose JVM lives a minute or so (a server a test module
    starts, a job a test kills): the JIT's first tier only, whose code is ready sooner than
    the second's on two busy cores. Measured 2026-12-02 in alternating runs: test_crash
    78-86 s against 96-99 s; the server tests with test_feed_crash 216 s against 252 s.
    """
    options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    return {"JAVA_TOOL_OPTIONS": f"{options} {QUICK_JVM}".strip()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    """A running server: its client, process, log file and data root."""

    client: Client
    proc: subprocess.Popen
    log: IO[str]
    data_root: Path
    port: int
    feed_port: int

    def log_text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def start_server(folder: Path, *args: str, token: str | None = None,
                 env: dict[str, str] | None = None, port: int | None = None,
                 feed_port: int | None = None, wait: bool = True) -> Served:
    """Start ``sparkcq serve`` with a data root ``folder/data`` and wait until it answers
    (unless not ``wait``), on free ports or on ``port`` and ``feed_port`` (a restart keeps
    its clients').
    """
    port = port or free_port()
    feed_port = feed_port or free_port()
    data_root = folder / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    log = open(folder / "server.log", "w+")  # noqa: SIM115 - closed with the process
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
    environ = {**os.environ, "SPARKCQ_DRIVER_MEMORY": "1g", "PYTHONFAULTHANDLER": "1",
               "PYTHONPATH": path, **short_lived_jvm(), **(env or {})}
    command = [sys.executable, "-m", "sparkcq.cli", "--master", "local[2]", "serve",
               "--port", str(port), "--interval", "0.5", "--allow-udf-module", "udas",
               "--feed-port", str(feed_port), "--data-root", str(data_root), *args]
    if token:
        command += ["--token", token]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environ)
    served = Served(Client(f"http://127.0.0.1:{port}", token), proc, log, data_root, port,
                    feed_port)
    deadline = time.monotonic() + 120
    while wait:
        try:
            served.client.status()
            return served
        except ServerError as e:
            if e.status not in (0, 503):
                return served  # it answers (401 without the token, ...)
            if proc.poll() is not None or time.monotonic() > deadline:
                served.stop()
                pytest.fail(f"server did not start:\n{served.log_text()[-3000:]}")
            time.sleep(0.5)
    return served


def wait_for(predicate, timeout: float = 90):
    """The first truthy value of ``predicate()``, polled until ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value is not None and value is not False:
            return value
        time.sleep(0.3)
    pytest.fail("timed out")
