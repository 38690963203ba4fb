# Two entry points that work on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

FLINK_VENV := .venv-flink
FLINK_STAMP := $(FLINK_VENV)/.installed
# the modules of the Python API reference (`make api-docs`; tests/test_api_reference.py)
API_MODULES := sparkcq sparkcq.engine sparkcq.errors sparkcq.testing sparkcq.client sparkcq.server.client sparkcq.aggregates.user sparkcq.aggregates.library sparkcq.table_functions.user sparkcq.table_functions.library

.PHONY: api-docs demo test lint check-java class-archive postgres-deps browser-deps clean bench bench-quick bench-nexmark bench-feed bench-shedding bench-latency bench-demo

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,server,bench,postgres]'
	@touch $(STAMP)

# Flink SQL for the benchmarks, in its own environment: PyFlink pins numpy, pandas, pyarrow
$(FLINK_STAMP):
	@test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install --quiet apache-flink==2.3.0
	@touch $(FLINK_STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "sparkcq needs Java 17 or newer on PATH (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "sparkcq needs Java 17 or newer; found: $$(java -version 2>&1 | head -n1)"; exit 1; fi

# PostgreSQL server and JDBC driver for tests/io/test_postgres.py: installed with apt-get when
# missing and running as root, else a note (an error under CI=true); installed before pytest
# starts, as Spark's session takes the driver jar only when it starts
postgres-deps:
	$(PYTHON) tests/postgres_server.py install

# Chromium for the real-browser tests (Playwright drives the system's browser by its path;
# Playwright's own browser download is not used): installed with apt-get when missing and
# running as root, else a note (an error under CI=true)
browser-deps:
	$(PYTHON) tests/browser.py install

demo: $(STAMP) check-java
	$(BIN)/sparkcq demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check sparkcq tests benchmarks
	$(BIN)/mypy

# the JVM classes a Spark session loads, archived once per Java and Spark version
# (sparkcq/class_archive.py): each of the suite's twenty-odd JVMs starts about 3 s sooner
class-archive: $(STAMP) check-java
	$(BIN)/sparkcq class-archive

# the tests in two processes, each with its Spark session: one process keeps 1.2 cores busy
# on average (its driver, the JVM answering it and the tasks take turns), two keep both busy.
# Work stealing hands each process the next test as it frees, so the long tests do not queue
# behind one another at the end (2 cores, 2026-12-03: 830 s against 1,126 s in one process)
TEST_PROCESSES ?= 2

test: $(STAMP) check-java postgres-deps browser-deps class-archive lint
	$(BIN)/python -m pytest -q -n $(TEST_PROCESSES) --dist worksteal $(ARGS)

# every engine timed by one rule: the marginal rate between 1M and 3M events (marginal.py)
bench: $(STAMP) $(FLINK_STAMP) check-java
	$(BIN)/python -m benchmarks.suite --sizes 1000000,3000000 $(ARGS)
	$(BIN)/python benchmarks/shedding.py

# NEXMark q5, q7 and q8 at sizes where every engine's marginal rate is steady (at `make
# bench`'s sizes q8 takes a second or two on each engine): 552K and 22M bids, 48K and 4M
# persons and auctions, and Flink's q8 alone also at 48K and 16M (at 4M its whole runs
# differ by a second or two on about 15 s of marginal work); about 75 minutes
bench-nexmark: $(STAMP) $(FLINK_STAMP) check-java
	$(BIN)/python -m benchmarks.suite nexmark-q5 nexmark-q7 --sizes 3000000,120000000 --out $$(date +%F)-nexmark $(ARGS)
	$(BIN)/python -m benchmarks.suite nexmark-q8 --sizes 3000000,250000000 --out $$(date +%F)-nexmark-q8 $(ARGS)
	$(BIN)/python -m benchmarks.suite nexmark-q8 --engines flink --sizes 3000000,1000000000 --out $$(date +%F)-nexmark-q8-flink $(ARGS)

# load shedding of a windowed join (docs/shedding.md); ARGS=--quick for shorter runs
bench-shedding: $(STAMP) check-java
	$(BIN)/python benchmarks/shedding.py $(ARGS)

bench-quick: $(STAMP) $(FLINK_STAMP) check-java
	$(BIN)/python -m benchmarks.suite --quick $(ARGS)

# small cycles (1,000 events each): cycle p50/p99 of sparkcq against Spark SS's micro-batch
bench-latency: $(STAMP) check-java
	$(BIN)/python -m benchmarks.suite.latency $(ARGS)

# `make demo` as a user runs it, three 90 s runs: each run's cycle p50, slowest, over 1 s
bench-demo: $(STAMP) check-java
	$(BIN)/python -m benchmarks.demo_cycles $(ARGS)

# the feed over loopback (accepted rows/s, send-to-result latency); ARGS=--quick to try it
bench-feed: $(STAMP) check-java
	$(BIN)/python benchmarks/feed.py $(ARGS)

# the Python API reference, from the docstrings, into build/api/index.html
api-docs: $(STAMP)
	$(BIN)/python -W error -m pdoc --output-directory build/api $(API_MODULES)

clean:
	rm -rf $(VENV) $(FLINK_VENV) benchmarks/.data .pytest_cache .mypy_cache .ruff_cache spark-warehouse
