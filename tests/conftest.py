"""One Spark session for the whole test run: small shuffle partitions, UI off.

PostgreSQL (``postgres`` fixture, tests/postgres_server.py): when a collected test uses it,
its packages are installed (as root) before any test runs, so the Spark session, started
later, finds the JDBC driver; the server is private to the session. Without the packages
and not root the tests are skipped, naming what to install; under ``CI=true`` they fail.

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``ci`` (the default) keeps the property suite
within the test budget; ``slow`` runs ten times as many scenarios. Failing examples are kept
in ``tests/.hypothesis/examples`` and replayed first on the next run.
"""

from __future__ import annotations

import os
from pathlib import Path

import postgres_server
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from sparkcq import Engine
from sparkcq.session import make_session

_EXAMPLES = DirectoryBasedExampleDatabase(Path(__file__).parent / ".hypothesis" / "examples")
_COMMON = {
    "deadline": None,  # a scenario is an engine run of several Spark cycles
    "database": _EXAMPLES,
    "print_blob": True,
    # a scenario draws many cases; an engine run takes seconds
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                              HealthCheck.large_base_example],
}
settings.register_profile("ci", max_examples=2, **_COMMON)
settings.register_profile("slow", max_examples=20, **_COMMON)
# one scenario, no shrinking: to iterate on a failure quickly
settings.register_profile("dev", max_examples=1,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate], **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_POSTGRES_PROBLEM: list[str | None] = [None]  # why the postgres fixture cannot start


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install PostgreSQL's packages if a selected test needs them, before Spark starts."""
    if any("postgres" in getattr(item, "fixturenames", ()) for item in session.items):
        _POSTGRES_PROBLEM[0] = postgres_server.ensure_installed()


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL server for the session (``.url``, ``.conninfo()``)."""
    problem = _POSTGRES_PROBLEM[0]
    if problem is None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            problem = "the PostgreSQL tests need psycopg: pip install -e '.[postgres]'"
    if problem is not None:
        if postgres_server.in_ci():
            pytest.fail(f"CI must run the PostgreSQL tests: {problem}")
        pytest.skip(problem)
    server = postgres_server.PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark():
    session = make_session("local[2]", app_name="sparkcq-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def engine(spark, tmp_path):
    """A fresh engine (its own catalog and plan) on the shared session, sandboxed like a
    server's (plan/sandbox.py) with the test's ``tmp_path`` as its data root.
    """
    return Engine(spark=spark, data_roots=[str(tmp_path)])


@pytest.fixture
def trusted_engine(spark):
    """A fresh engine that may call any function and name any path (``trusted=True``)."""
    return Engine(spark=spark, trusted=True)


def pytest_terminal_summary(terminalreporter) -> None:
    """How many generated cases each query shape was checked on (tests/scenarios.py)."""
    from scenarios import CASES_CHECKED, SCHEDULE_STATS, SHED_PAIRS

    if not CASES_CHECKED:
        return
    terminalreporter.section("property cases checked against the reference")
    for label, n in sorted(CASES_CHECKED.items()):
        terminalreporter.write_line(f"{n:7d}  {label}")
    for label, n in SCHEDULE_STATS.items():
        terminalreporter.write_line(f"{n:7d}  {label}")
    for label, n in SHED_PAIRS.items():
        terminalreporter.write_line(f"{n:7d}  shedding below z = 1: {label}")
