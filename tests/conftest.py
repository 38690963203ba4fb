"""One Spark session per test process: small shuffle partitions, UI off, a 4 GB heap.

``make test`` runs two test processes (pytest-xdist, work stealing); ``pytest`` alone runs
one. Each process shares its session among all its tests.

PostgreSQL (``postgres`` fixture, tests/postgres_server.py): when a collected test uses it,
its packages are installed (as root) before any test runs, so the Spark session, started
later, finds the JDBC driver; the server is private to the session. Without the packages
and not root the tests are skipped, naming what to install; under ``CI=true`` they fail.

A real browser (``browser`` and ``page`` fixtures, tests/browser.py): Playwright driving the
system's Chromium, headless, installed the same way and skipped or failed the same way. It
starts when the first test that uses it does, never for a session without one; between the
tests that use it, its event loop is paused (``pytest_runtest_protocol``), as other tests of
the session run event loops of their own in the same thread.

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``ci`` (the default) keeps the property suite
within the test budget, and under ``CI=true`` draws the same scenarios on every run; ``slow``
runs ten times as many scenarios. Failing examples are kept in ``tests/.hypothesis/examples``
and replayed first on the next run.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import browser as system_browser
import debian_packages
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
# under CI=true the draws are derived from each test's name: a landing depends on the change,
# not on the luck of the draw; a local run draws fresh scenarios every time
if os.environ.get("CI") == "true":
    settings.register_profile("ci", max_examples=2, derandomize=True,
                              **{**_COMMON, "database": None})
else:
    settings.register_profile("ci", max_examples=2, **_COMMON)
settings.register_profile("slow", max_examples=20, **_COMMON)
# one scenario, no shrinking: to iterate on a failure quickly
settings.register_profile("dev", max_examples=1,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate], **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_POSTGRES_PROBLEM: list[str | None] = [None]  # why the postgres fixture cannot start
_BROWSER_PROBLEM: list[str | None] = [None]  # why the browser fixture cannot start
_BROWSER: list[system_browser.SystemBrowser] = []  # the browser once a test started it


def _uses(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install the packages of PostgreSQL and of the browser if a selected test needs them,
    before Spark starts.
    """
    if any(_uses(item, "postgres") for item in session.items):
        _POSTGRES_PROBLEM[0] = postgres_server.ensure_installed()
    if any(_uses(item, "browser") for item in session.items):
        _BROWSER_PROBLEM[0] = system_browser.ensure_installed()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Resume the browser's event loop for a test that uses it (``page`` uses ``browser``),
    and pause it after, so that the other tests may run event loops of their own.
    """
    if not _uses(item, "browser"):
        return (yield)
    if _BROWSER:  # else it starts in this test's setup, if it can
        _BROWSER[0].resume()
    try:
        return (yield)
    finally:
        if _BROWSER:
            _BROWSER[0].pause()


def require(tests: str, problem: str | None, module: str, extra: str) -> None:
    """Skip (or under ``CI=true`` fail) a test whose system packages are missing
    (``problem``) or whose Python ``module`` is not installed.
    """
    if problem is None and importlib.util.find_spec(module) is None:
        problem = f"the {tests} tests need {module}: pip install -e '.[{extra}]'"
    if problem is not None:
        if debian_packages.in_ci():
            pytest.fail(f"CI must run the {tests} tests: {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL server for the session (``.url``, ``.conninfo()``)."""
    require("PostgreSQL", _POSTGRES_PROBLEM[0], "psycopg", "postgres")
    server = postgres_server.PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser():
    """A Playwright ``Browser``: the system's Chromium, headless, for the session."""
    require("browser", _BROWSER_PROBLEM[0], "playwright", "dev")
    started = system_browser.SystemBrowser.start()
    _BROWSER.append(started)
    try:
        yield started.browser
    finally:
        _BROWSER.clear()
        started.stop()


@pytest.fixture
def page(browser):
    """A Playwright ``Page`` in a fresh browser context (no cookies or storage of other
    tests), closed after the test.
    """
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


# The suite's one JVM runs thousands of new plans, and each class Spark's code generation
# compiles leaves objects behind in the JVM's class loaders (about a megabyte per new
# query, docs/architecture.md "What a cycle does not build"): in 2 GB the collector marks
# the whole heap again and again in the suite's second half. A long-running engine compiles
# its plans once, so this is the test session's setting, not the engine's default.
# The suite wants throughput, not short pauses: the parallel collector has cheaper write
# barriers than G1 and no concurrent threads beside the test on the second core (property
# tests in alternating runs, 2026-11-30: three of them 150-159 s against 162-175 s with G1,
# four others 127-134 s against 132-137 s). An engine keeps Java's default, G1, whose
# pauses stay short: a full collection of the parallel collector stops a cycle for seconds.
TEST_SESSION_CONF = {"spark.driver.memory": os.environ.get("SPARKCQ_DRIVER_MEMORY", "4g"),
                     "spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}


@pytest.fixture(scope="session")
def spark():
    session = make_session("local[2]", app_name="sparkcq-tests", shuffle_partitions=2,
                           conf=TEST_SESSION_CONF)
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


# ``make test`` runs the tests in two processes (pytest-xdist's workers): each counts the cases
# its property tests checked, and sends its counts to the process that prints the summary
_COUNTS = "property_case_counts"


def _counters():
    from scenarios import CASES_CHECKED, SCHEDULE_STATS, SHED_PAIRS

    return {"cases": CASES_CHECKED, "schedule": SCHEDULE_STATS, "shed": SHED_PAIRS}


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a worker process, hand its counts to the controlling process."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[_COUNTS] = {name: dict(counter) for name, counter in _counters().items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """In the controlling process, add a finished worker's counts to its own."""
    counts = getattr(node, "workeroutput", {}).get(_COUNTS, {})
    for name, counter in _counters().items():
        counter.update(counts.get(name, {}))


def pytest_terminal_summary(terminalreporter) -> None:
    """How many generated cases each query shape was checked on (tests/scenarios.py)."""
    counts = _counters()
    if not counts["cases"]:
        return
    terminalreporter.section("property cases checked against the reference")
    for label, n in sorted(counts["cases"].items()):
        terminalreporter.write_line(f"{n:7d}  {label}")
    for label, n in counts["schedule"].items():
        terminalreporter.write_line(f"{n:7d}  {label}")
    for label, n in counts["shed"].items():
        terminalreporter.write_line(f"{n:7d}  shedding below z = 1: {label}")
