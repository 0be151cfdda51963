# The two commands of the README. Both create .venv from requirements.lock on first use, so a
# machine with only python3 and make is enough.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

# Debian's chromium, not a Playwright-downloaded browser (that would need a network fetch outside the
# package registries); sudo only where we are not root and it exists.
CHROMIUM := /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null || echo sudo)

.PHONY: up test bench clean system-packages bytecode

# uv installs the lock in seconds where pip takes over a minute (most of a CI run's set-up); pip
# remains the way in wherever uv cannot run or reach the index. Both compile the bytecode at install:
# with PYTHONDONTWRITEBYTECODE set (as on CI machines) Python never caches it, and every process of the
# test stacks would compile litellm, temporalio and the rest from source again at each start.
UV_VERSION := 0.13.9

$(STAMP): requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	{ $(PY) -m pip install --quiet uv==$(UV_VERSION) && \
	  $(VENV)/bin/uv pip install --quiet --native-tls --compile-bytecode --python $(PY) -r requirements.lock && \
	  $(VENV)/bin/uv pip install --quiet --native-tls --python $(PY) --no-deps -e .; } || { \
	  echo "uv could not install the lock; installing it with pip"; \
	  $(PY) -m pip install --quiet --upgrade pip && $(PY) -m pip install --quiet -r requirements.lock && $(PY) -m pip install --quiet --no-deps -e .; }
	touch $(STAMP)

# Berth's own modules compiled too (Python checks each cached file against its source's time stamp).
bytecode: $(STAMP)
	@$(PY) -m compileall -q orchestrator activities workflows sdk

up: $(STAMP) bytecode
	$(VENV)/bin/berth up --demo

# The browser tests drive Debian's chromium; the store and pool suites also run on a PostgreSQL server the
# tests start themselves (tests/postgres.py) from Debian's binaries, under /usr/lib/postgresql/<version>/bin,
# off PATH. Whatever is missing is installed with one apt-get update.
system-packages:
	@missing=""; \
	[ -x $(CHROMIUM) ] || missing="$$missing chromium"; \
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	[ -z "$$missing" ] || { echo "installing Debian's$$missing for the tests"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }

# Two runs: the in-process suites on both cores (pytest-xdist), then the suites that start whole
# stacks of real processes (system, browser), one at a time, since each of those fills both cores.
SERIAL_SUITES := tests/system tests/browser

test: $(STAMP) system-packages bytecode
	$(VENV)/bin/pytest -q -n 2 --durations=10 $(addprefix --ignore=,$(SERIAL_SUITES))
	$(VENV)/bin/pytest -q --durations=15 $(SERIAL_SUITES)

bench: $(STAMP) system-packages
	$(PY) -m benchmarks.step_overhead
	$(PY) -m benchmarks.fleet_step
	$(PY) -m benchmarks.resume_time
	$(PY) -m benchmarks.work_lost
	$(PY) -m benchmarks.checkpoint_storage
	$(PY) -m benchmarks.load_run
	$(PY) -m benchmarks.telemetry_overhead
	$(PY) -m benchmarks.simulate_scenarios
	$(PY) -m benchmarks.pool_concurrency

clean:
	rm -rf $(VENV) .berth
