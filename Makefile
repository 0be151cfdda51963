# The two commands of the README. Both create .venv from requirements.lock on first use, so a
# machine with only python3 and make is enough.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

# The browser tests drive Debian's chromium (a Playwright-downloaded browser would need a
# network fetch outside the package registries); sudo only where we are not root and it exists.
CHROMIUM := /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null || echo sudo)

.PHONY: up test bench clean chromium postgresql

$(STAMP): requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

up: $(STAMP)
	$(VENV)/bin/berth up --demo

chromium:
	@[ -x $(CHROMIUM) ] || { echo "installing Debian's chromium for the browser tests"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# The store and pool suites also run on a PostgreSQL server the tests start themselves (tests/postgres.py)
# from Debian's binaries, which live under /usr/lib/postgresql/<version>/bin, off PATH.
postgresql:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing Debian's postgresql for the store tests"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }

# Two runs: the in-process suites on both cores (pytest-xdist), then the suites that start whole
# stacks of real processes (system, browser), one at a time, since each of those fills both cores.
SERIAL_SUITES := tests/system tests/browser

test: $(STAMP) chromium postgresql
	$(VENV)/bin/pytest -q -n 2 --durations=10 $(addprefix --ignore=,$(SERIAL_SUITES))
	$(VENV)/bin/pytest -q --durations=15 $(SERIAL_SUITES)

bench: $(STAMP) postgresql
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
