# mqtt-cli: set-up, tests and builds. GNU make; Debian 12, Python 3.11.
#   make install   .venv with the project (editable), its test tools and pyspark; as root also Debian packages
#   make test      ruff check and mypy, then the whole pytest suite
# `make help` lists every target.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
.NOTPARALLEL:

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WEB := tests/web
WEB_STAMP := $(WEB)/node_modules/.installed
ZIPAPP ?= dist/mqtt.pyz
PYTEST_ARGS ?=
# Workers for the suite (pytest-xdist): one per core. Tests that share a heavy peer (RabbitMQ) are kept on one
# worker by their xdist_group (tests/conftest.py), so each peer starts once.
PYTEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
ARGS ?=

# The hot modules compiled with mypyc (scripts/build_compiled.py), rebuilt when one of their sources changes; their
# list is mqtt_cli/buildmode.py's COMPILED, read here. Without a C compiler, or with MQTT_CLI_PURE=1, there is no
# build: pure Python runs.
COMPILED_SOURCES := $(shell $(PYTHON) -c 'import runpy; print(" ".join(m.replace(".", "/") + ".py" for m in runpy.run_path("mqtt_cli/buildmode.py")["COMPILED"]))' 2>/dev/null)
COMPILED_STAMP := mqtt_cli/compiled.stamp

.PHONY: help install system-deps web-deps compiled test lint serve zipapp completions bench bench-quick fuzz clean \
	distclean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: system-deps $(STAMP) compiled web-deps ## .venv with the project, its test tools, the compiled build (+ Debian packages as root)

system-deps: ## as root: apt-get install what is missing (mosquitto, tshark, rabbitmq, java, chromium, node)
	@bash scripts/install-system-deps.sh $(PYTHON)

web-deps: $(WEB_STAMP) ## npm packages of the browser test (MQTT.js) into tests/web/node_modules, as locked

# npm ci: exactly what package-lock.json says, no install scripts run. Without npm (a developer who is not root):
# say so and go on; the browser test then skips with the same advice (in CI, as root, npm is installed above).
$(WEB_STAMP): $(WEB)/package.json $(WEB)/package-lock.json
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "make install: no npm, so no MQTT.js for the browser test (install Debian's npm, or make install as root)" >&2; \
	else \
		npm ci --prefix $(WEB) --ignore-scripts --no-audit --no-fund --loglevel=error && touch $@; \
	fi

# (make -n must not run the build: no $(MAKE) in a recipe, the choice is made here)
ifneq ($(filter-out 0,$(MQTT_CLI_PURE)),)
compiled: $(STAMP)
	$(BIN)/python scripts/build_compiled.py --clean
	@echo "MQTT_CLI_PURE is set: no compiled build, pure Python runs"
else
compiled: $(COMPILED_STAMP) ## compile the hot modules with mypyc (MQTT_CLI_PURE=1: remove the build, run pure Python)
endif

# A failed build (no C compiler, a compile error) leaves no build behind and does not stop make: pure Python runs,
# and `mqtt --version` says so. The next make tries again.
$(COMPILED_STAMP): $(COMPILED_SOURCES) $(STAMP)
	@echo "compiling $(COMPILED_SOURCES) with mypyc (a minute or two)"
	@$(BIN)/python scripts/build_compiled.py || echo "make: no compiled build; everything runs as pure Python" >&2

# Re-installs only when pyproject.toml is newer than the stamp (or there is no .venv yet).
$(STAMP): pyproject.toml
	@if [ ! -x $(BIN)/python ]; then \
		echo "creating $(VENV) with $(PYTHON)"; \
		$(PYTHON) -m venv --clear $(VENV); \
	fi
	@# a .venv made before the distribution was named mqttkit holds it as mqtt-cli: one `mqtt`, one version
	@$(BIN)/python -m pip uninstall --quiet --yes mqtt-cli >/dev/null 2>&1 || true
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,spark]'
	@touch $@

# With a compiled build the whole suite runs on it, then the core's tests again on pure Python (both must work).
test: install lint ## ruff check and mypy, then the whole test suite (no test collected counts as a failure)
	@cmd="$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 $(PYTEST_ARGS)"; echo "$$cmd"; rc=0; $$cmd || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; \
	if [ $$rc -eq 0 ] && [ -z "$(PYTEST_ARGS)" ] && [ -f $(COMPILED_STAMP) ]; then \
		cmd="$(BIN)/pytest -n $(PYTEST_WORKERS) -q tests/core"; \
		echo "MQTT_CLI_PURE=1 $$cmd"; MQTT_CLI_PURE=1 $$cmd || rc=$$?; \
	fi; \
	exit $$rc

lint: $(STAMP) ## ruff check, then mypy (strict, on the packages [tool.mypy] names in pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/mypy

serve: install ## run the broker (ARGS="..." passes options)
	$(BIN)/mqtt serve $(ARGS)

# shiv packs it; scripts/build_zipapp.py then gives it an entry point that skips shiv's bootstrap once unpacked.
zipapp: $(STAMP) ## build dist/mqtt.pyz (ZIPAPP=path to change), one file with its dependencies (shiv)
	$(BIN)/python scripts/build_zipapp.py $(ZIPAPP)
	@echo "built $(ZIPAPP)"

completions: $(STAMP) ## regenerate completions/ from the app
	@mkdir -p completions
	@for pair in bash:mqtt.bash zsh:_mqtt fish:mqtt.fish; do \
		shell=$${pair%%:*}; file=completions/$${pair#*:}; \
		$(BIN)/mqtt completions $$shell > $$file.tmp; mv $$file.tmp $$file; echo "wrote $$file"; \
	done

fuzz: $(STAMP) ## coverage-guided fuzzing of the codec and the broker core (SECONDS=600 per target)
	$(BIN)/python scripts/fuzz.py --seconds $(or $(SECONDS),600) $(ARGS)

# The load generator is the project's own `mqtt bench`; MQTTLOAD_DIR=DIR (the C generator mqttload's source)
# makes the broker benchmarks use that instead (benchmarks/_loadgen.py).
bench: $(STAMP) ## run every script in benchmarks/ (figures: docs/PERFORMANCE.md)
	@rc=0; for script in benchmarks/*.py; do \
		case $${script##*/} in _*) continue ;; esac; \
		echo "== $$script"; $(BIN)/python $$script || { rc=1; echo "== $$script FAILED" >&2; }; \
	done; exit $$rc

# Each script's --quick: small counts, one rep. Raw results go to a temporary directory (MQTT_BENCH_RESULTS),
# not benchmarks/results/, which holds the figures of docs/PERFORMANCE.md. broker_instructions.py is left out:
# under callgrind even its --quick takes about a minute.
bench-quick: $(STAMP) ## every benchmark once, briefly: does this machine run them all (a few minutes)
	@results=$$(mktemp -d); rc=0; start=$$(date +%s); for script in benchmarks/*.py; do \
		case $${script##*/} in _*|broker_instructions.py) continue ;; esac; \
		echo "== $$script --quick"; t0=$$(date +%s); \
		MQTT_BENCH_RESULTS=$$results $(BIN)/python $$script --quick || { rc=1; echo "== $$script FAILED" >&2; }; \
		echo "== $$script: $$(( $$(date +%s) - t0 )) s"; \
	done; rm -rf "$$results"; echo "make bench-quick: $$(( $$(date +%s) - start )) s in all"; exit $$rc

clean: ## remove build output and caches (keeps .venv)
	rm -rf dist build .pytest_cache .ruff_cache .hypothesis ./*.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean ## clean, and remove .venv
	rm -rf $(VENV)
