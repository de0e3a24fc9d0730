# Checkpoint Console — the two commands a new user needs: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
HASH := $(shell cat pyproject.toml clients/python/pyproject.toml | cksum | cut -d' ' -f1)
RUNTIME := $(VENV)/.runtime-$(HASH)
DEV := $(VENV)/.dev-$(HASH)
PORT ?= 8000
PG_TEST_URL ?= postgres://postgres@127.0.0.1:5432/checkpoint_console
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15

.PHONY: install install-runtime run manage test bench lint docs clean

# `make run` needs only the runtime packages; `make test`, `lint`, `docs` and `bench` add the tools (the
# test, lint and docs extras, and LangGraph for the client's saver). Each step is reinstalled only when a
# pyproject.toml changes.
install: $(DEV)
install-runtime: $(RUNTIME)

$(RUNTIME): pyproject.toml clients/python/pyproject.toml
	@test -x $(PY) || { echo "make: creating the virtualenv $(VENV)"; python3 -m venv $(VENV); }
	@echo "make: installing the runtime packages into $(VENV) (about a minute the first time)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -e ./clients/python -e .
	@rm -f $(VENV)/.runtime-*
	@touch $@

$(DEV): $(RUNTIME)
	@echo "make: installing the test, lint and docs tools into $(VENV)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -e "./clients/python[langgraph]" -e ".[test,lint,docs]"
	@rm -f $(VENV)/.dev-*
	@touch $@

# Embedded defaults: SQLite under var/, the filesystem broker, DEBUG on. Ctrl-C stops web, worker and beat; a
# child that dies is restarted, and `make run` fails when one keeps dying.
run: install-runtime
	@echo "make: applying database migrations"
	@DEBUG=$${DEBUG:-1} $(PY) manage.py migrate --no-input
	@echo "make: starting the web server, a Celery worker and beat on port $(PORT)"
	@DEBUG=$${DEBUG:-1} $(PY) manage.py serve --bootstrap --port $(PORT)

# Any manage.py command with the project's interpreter: make manage ARGS="createsuperuser"
manage: install-runtime
	@$(PY) manage.py $(ARGS)

# Uses PostgreSQL and Redis when they answer on 127.0.0.1 (or DATABASE_URL / REDIS_URL are set);
# otherwise SQLite, and the tests that need a server are skipped with the reason.
# Three pytest-xdist workers (PYTEST_WORKERS=0: one process), each with its own test database: on two cores a
# third keeps them busy while a test waits for PostgreSQL, Chromium or a server. --dist load hands each worker its
# tests in the conftest's order (tests in a transaction before transactional ones); each worker has its own Redis
# database (tests/conftest.py). The 25 slowest tests are listed at the end.
PYTEST_WORKERS ?= 3
test: install
	@export DATABASE_URL="$${DATABASE_URL:-$$(pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null && echo $(PG_TEST_URL))}"; \
	export REDIS_URL="$${REDIS_URL:-$$(redis-cli -h 127.0.0.1 ping 2>/dev/null | grep -q PONG && echo $(REDIS_TEST_URL))}"; \
	echo "make test: database $${DATABASE_URL:-SQLite (embedded)}; redis $${REDIS_URL:-none}"; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist load --durations=25 $(PYTEST_ARGS)

bench: install
	$(PY) bench/run.py $(BENCH_ARGS)

# The docs site is built without --quiet: --quiet hides the warnings --strict counts, and a broken link would pass.
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports  # the wings' import contracts in pyproject.toml: arrows down, no cycles between siblings
	$(PY) manage.py makemigrations --check --dry-run --verbosity 0  # a model change without its migration
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# The documentation site (docs/, mkdocs.yml) at http://127.0.0.1:8001/, rebuilt as pages change.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve -a 127.0.0.1:8001

clean:
	rm -rf $(VENV) var staticfiles site .pytest_cache .hypothesis
