# Two commands matter: `make demo` (install into .venv, run the main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv browser lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/profuse study rmsnorm

# Browser tests drive Debian's Chromium through Playwright's client (no browser download).
browser:
	@test -x /usr/bin/chromium || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

test: $(STAMP) browser
	$(BIN)/python -m pytest -q -p no:logging

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src/profuse

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_load.py
	$(BIN)/python benchmarks/bench_explorer.py

clean:
	rm -rf $(VENV) .pytest_cache
