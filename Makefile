# Two commands matter: `make demo` (install into .venv, run the main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCANNER := $(VENV)/.scanner

.PHONY: demo test venv browser lint bench clean sanitize

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	PROFUSE_REQUIRE_SCANNER=1 $(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# The compiled scanner, rebuilt in place when its source changes (pip built it at install time).
$(SCANNER): $(STAMP) src/profuse/trace/_scan.c src/profuse/trace/_accel.c setup.py
	PROFUSE_REQUIRE_SCANNER=1 $(BIN)/python setup.py -q build_ext --inplace
	touch $(SCANNER)

# profuse's emulated PrivateUse1 device (src/profuse/emu, docs/neuron.md), compiled against the venv's
# torch: rebuilt when its source, its build script or the installed torch (the stamp) changes.
EMU := src/profuse/emu/_emu.so
$(EMU): $(STAMP) src/profuse/emu/_emu.cpp tools/build_emu.py
	$(BIN)/python tools/build_emu.py

# profuse's own bytecode, as a wheel install writes it: an editable install leaves none, and where
# PYTHONDONTWRITEBYTECODE is set (these machines) every command would compile ~115 modules (0.1 s each run).
venv: $(STAMP) $(SCANNER) $(EMU)
	@$(BIN)/python -m compileall -q src/profuse

demo: venv
	$(BIN)/profuse study rmsnorm

# Browser tests drive Debian's Chromium through Playwright's client (no browser download).
browser:
	@test -x /usr/bin/chromium || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# The front end's JS unit tests (node's built-in runner, node >= 20) first, then the Python suite.
test: venv browser
	node --test tests/js/*.test.mjs
	$(BIN)/python -m pytest -q -p no:logging

# Code shape over all of src: complexity <= 15 (ruff C901, [tool.ruff.lint.mccabe]) and functions
# <= 60 lines. The front end is type-checked against the generated types.js (tsconfig.json;
# typescript from npm, package.json's devDependencies, installed into node_modules/ on first use).
SHAPED := src/profuse

lint: venv
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff check --select C901 $(SHAPED)
	$(BIN)/python tools/check_function_length.py --max 60 $(SHAPED)
	$(BIN)/mypy --strict src/profuse
	@test -x node_modules/.bin/tsc || npm install --no-audit --no-fund --silent
	node_modules/.bin/tsc -p tsconfig.json

# The compiled scanner built with ASan + UBSan in a temporary folder, run over the differential test
# and a larger mutation corpus, the nesting pass over random overlaps, the Arrow stream the events
# table is written from and the parallel file read (the interpreter itself is not instrumented:
# libasan is preloaded).
# `make sanitize SANITIZE_CFLAGS=-DPROFUSE_SCAN_PORTABLE` checks the portable (no SSE2) string scan.
sanitize: venv
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	PROFUSE_REQUIRE_SCANNER=1 PROFUSE_SCAN_CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all $(SANITIZE_CFLAGS)" \
	PROFUSE_SCAN_LDFLAGS="-fsanitize=address,undefined" \
	$(BIN)/python setup.py -q build_ext --build-lib "$$tmp/lib" --build-temp "$$tmp/tmp" >/dev/null; \
	lib=$$(ls "$$tmp"/lib/profuse/trace/_scan*); ldd "$$lib" | grep -E 'lib(a|ub)san' ; \
	accel_lib=$$(ls "$$tmp"/lib/profuse/trace/_accel*); ldd "$$accel_lib" | grep -E 'lib(a|ub)san' ; \
	PROFUSE_SCAN_LIB="$$lib" PROFUSE_ACCEL_LIB="$$accel_lib" PROFUSE_FUZZ_PER_TRACE=$${FUZZ:-12} PROFUSE_SCAN_FUZZ=$${SCAN_FUZZ:-2000} ASAN_OPTIONS=detect_leaks=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	$(BIN)/python -m pytest -q -p no:logging -p no:cacheprovider tests/test_scanner.py tests/test_correlate_rules.py tests/test_accel.py \
		tests/test_arrow_events.py tests/test_read_file.py tests/test_map_file.py

# Every row of the speed table (issue 23) with its target, against HTA and the scanner floor measured in
# the same run; BENCH="--quick" skips the 1 GB inputs. Reports, never fails on a figure.
bench: venv browser
	$(BIN)/python benchmarks/bench_all.py $(BENCH)

clean:
	rm -rf $(VENV) .pytest_cache
