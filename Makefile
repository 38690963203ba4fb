# Two entry points that work on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint check-java clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,server]'
	@touch $(STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "sparkcq needs Java 17 or newer on PATH (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "sparkcq needs Java 17 or newer; found: $$(java -version 2>&1 | head -n1)"; exit 1; fi

demo: $(STAMP) check-java
	$(BIN)/sparkcq demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check sparkcq tests
	$(BIN)/mypy

test: $(STAMP) check-java lint
	$(BIN)/python -m pytest -q $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache spark-warehouse
