# The two commands of the README. Both create .venv from requirements.lock on first use, so a
# machine with only python3 and make is enough.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: up test bench clean

$(STAMP): requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

up: $(STAMP)
	$(VENV)/bin/berth up --demo

test: $(STAMP)
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) -m benchmarks.step_overhead
	$(PY) -m benchmarks.fleet_step
	$(PY) -m benchmarks.resume_time
	$(PY) -m benchmarks.work_lost
	$(PY) -m benchmarks.checkpoint_storage
	$(PY) -m benchmarks.load_run

clean:
	rm -rf $(VENV) .berth
