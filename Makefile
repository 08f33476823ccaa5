# Control Plane: `make run` starts the product (embedded mode), `make test` runs the whole suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# python3.12 from PATH, else a pyenv-installed 3.12.
PYTHON ?= $(shell for c in python3.12 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do $$c -c 'import sys; assert sys.version_info[:2]==(3,12)' >/dev/null 2>&1 && { echo $$c; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
SIM_PORT ?= 8001

# Tests use the local PostgreSQL and Redis unless told otherwise (CI exports these too).
TEST_DATABASE_URL ?= postgres://root@127.0.0.1:5432/controlplane
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
export TEST_REDIS_URL

.PHONY: help venv run test test-pg test-sqlite lint bench bench-ab bench-logs bench-hostile bench-profile bench-instructions bench-wire clean

help:
	@echo "make run   - start the console on http://$(HOST):$(PORT) (embedded mode, SQLite, demo data)"
	@echo "make test  - run the whole test suite (PostgreSQL + Redis, then SQLite)"
	@echo "make lint  - ruff (check + format), mypy (Django and DRF stubs), import-linter (the apps' layers)"
	@echo "make bench - breaker and gateway benchmarks (wrk, Redis)"
	@echo "make bench-ab BASE=<rev> - the gateway of another revision beside this tree's, interleaved (before/after)"
	@echo "make bench-logs - Request Logs and the Dashboard on 2,000,000 rows, ingest rate, freshness (PostgreSQL, Redis)"
	@echo "make bench-hostile - 50 concurrent maximal and hostile bodies: worker memory, /healthz latency (Redis)"
	@echo "make bench-profile - where one gateway worker's CPU goes, by stage, under load (py-spy)"
	@echo "make bench-instructions - instructions per request: healthy, failover, failover with the policy on (valgrind; load-independent)"
	@echo "make bench-wire - a paced stream's first byte hop by hop, from the packets' timestamps (tcpdump, as root)"

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@test -n "$(PYTHON)" || { echo "python3.12 not found: install Python 3.12 and retry" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

# SIM_PORT moves the simulator; SIMULATOR_URL (where the demo providers are seeded to point) follows it.
run: venv
	$(PY) manage.py migrate --noinput
	SIMULATOR_URL=http://127.0.0.1:$(SIM_PORT) $(PY) manage.py seed_demo
	SIMULATOR_URL=http://127.0.0.1:$(SIM_PORT) $(PY) manage.py run_embedded --host $(HOST) --port $(PORT) --simulator-port $(SIM_PORT)

# The two passes run side by side: they share no database, and only the PostgreSQL pass sets REDIS_URL (its
# production-mode keys); each Redis contract test uses keys of its own. Much of each pass waits on sockets and
# subprocesses rather than the CPU, so the suite takes about as long as the longer pass. The modules marked
# db_independent, whose outcome neither pass's database nor its REDIS_URL can change, run once, in the SQLite
# pass, which is the shorter one. The SQLite pass's output is printed after the PostgreSQL pass's; either
# failing fails the target.
test: venv
	@log=$$(mktemp); \
	$(MAKE) --no-print-directory test-sqlite SQLITE_MARKERS="not browser and not production" > $$log 2>&1 & lite=$$!; \
	$(MAKE) --no-print-directory test-pg PG_MARKERS="not db_independent"; pg=$$?; \
	wait $$lite; sq=$$?; \
	echo "--- SQLite pass (run alongside) ---"; cat $$log; rm -f $$log; \
	echo "PostgreSQL pass: exit $$pg; SQLite pass: exit $$sq"; \
	test $$pg -eq 0 && test $$sq -eq 0

# The suite against PostgreSQL and Redis (alone: every test; from make test: all but db_independent ones).
PG_MARKERS ?=
test-pg: venv
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(VENV)/bin/pytest $(if $(PG_MARKERS),-m "$(PG_MARKERS)") $(PYTEST_ARGS)

# The embedded path: SQLite and no REDIS_URL (Redis-backed contract tests still use TEST_REDIS_URL). Browser and
# production-mode (PostgreSQL + Redis) tests run in the PostgreSQL pass only; alone, this target leaves out the
# db_independent modules too (the simulator, the planner, the translation, the breaker's property tests, ...).
SQLITE_MARKERS ?= not browser and not production and not db_independent
test-sqlite: venv
	DATABASE_URL= REDIS_URL= $(VENV)/bin/pytest -m "$(SQLITE_MARKERS)" $(PYTEST_ARGS)

# Benchmarks (need wrk and a local Redis); figures go in the README's Performance section.
bench: venv
	$(PY) bench/breaker.py
	$(PY) bench/gateway.py

# Before/after in one run: BASE's gateway (a temporary git worktree) beside this tree's, in alternating slices.
BASE ?= HEAD
bench-ab: venv
	$(PY) bench/ab_gateway.py --base $(BASE)

# Request Logs: pages, API and CSV on 2,000,000 rows, ingest rate, freshness in both modes; the Dashboard on
# 2,000,000 rows and the ingest rate with its aggregates.
bench-logs: venv
	$(PY) bench/request_logs.py
	$(PY) bench/request_log_freshness.py
	$(PY) bench/dashboard.py

# Where one gateway worker's CPU goes, by stage, under load (py-spy); the table in docs/performance.md.
bench-profile: venv
	$(PY) bench/profile_gateway.py

# Instructions per request (valgrind's callgrind), healthy and failover: a count the machine's load does not move.
bench-instructions: venv
	$(PY) bench/instructions.py

# A paced stream's first byte, hop by hop, read off the loopback interface by tcpdump: nothing runs inside the
# measured processes. The gateway beside bench/reference_proxy.py's two kinds and the simulator itself.
bench-wire: venv
	$(PY) bench/wire_timeline.py

# Maximal and hostile request bodies against one gateway worker; figures go in the README's Reliability section.
bench-hostile: venv
	$(PY) bench/hostile_bodies.py

# Types and layers are checked against the embedded settings (no services needed).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL= REDIS_URL= $(VENV)/bin/mypy
	DATABASE_URL= REDIS_URL= $(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) var staticfiles
