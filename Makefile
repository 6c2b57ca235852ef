# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO    := build/demo

.PHONY: setup demo test lint schema-docs ui clean

setup: $(STAMP)

# torch first, pinned: the CPU build comes from local disk; an open range would pull CUDA.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: setup
	rm -rf $(DEMO)
	$(BIN)/worldline ingest data/sample/corpus --out $(DEMO)/corpus || test $$? -eq 3
	$(BIN)/worldline stats $(DEMO)/corpus
	$(BIN)/worldline query $(DEMO)/corpus "SELECT domain, source_format, count(*) AS trajectories, sum(num_turns) AS turns FROM trajectories GROUP BY ALL ORDER BY ALL"
	$(BIN)/worldline query $(DEMO)/corpus "SELECT exit_code, count(*) AS turns FROM turns WHERE exit_code IS NOT NULL GROUP BY ALL ORDER BY turns DESC LIMIT 5"

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .

schema-docs: setup
	$(BIN)/python -m schemas.docs > docs/schema.md

clean:
	rm -rf build
