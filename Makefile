# Everything runs from a virtual environment in .venv, created on first use.
VENV ?= .venv
BIN := $(VENV)/bin
# A development key and digest secret so the quick start works as written; set your own in
# production.
DEV_KEYS := dev:dev-secret-key:send+read+recipients+admin
DEV_DIGEST_SECRET := dev-digest-secret-not-for-production
# Redis and PostgreSQL: those at the default URLs when they answer (or the URLs you set), else
# private ones under .clarion/, started for the command and stopped after it
# (docs/running/installation.md). --for tests: the tests' variables, CLARION_TEST_REDIS_URL
# and CLARION_TEST_DATABASE_URL.
# devtools/ is development tooling run from this checkout, never installed in the image.
SERVICES := $(BIN)/python -m devtools.services exec

.PHONY: install browser nginx promtool podman container-check run test lint typecheck pytest docs docs-build test-cluster chaos bench bench-report bench-check bench-schedule bench-digests services-down clean

# The Python client (client/) is installed editable beside the server, so the tests import it.
$(BIN)/.installed: pyproject.toml client/pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./client
	touch $@

install: $(BIN)/.installed

## browser: the headless Chromium the dashboard test drives (Debian's packages, installed as root)
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "the dashboard test needs chromium and chromedriver:" \
				"sudo apt-get install chromium chromium-driver"; exit 1; \
		fi; \
		echo "installing chromium and chromium-driver"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

## nginx: the reverse proxy the example in deploy/nginx is tested with (Debian's package, as root;
## the test runs a private nginx of its own and skips without one)
nginx:
	@if ! command -v nginx >/dev/null 2>&1 && ! test -x /usr/sbin/nginx; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "the reverse-proxy test needs nginx: sudo apt-get install nginx-light"; exit 0; \
		fi; \
		echo "installing nginx-light"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq nginx-light >/dev/null; \
	fi

## promtool: Prometheus's rule checker, which the alert rules' test runs. Only the promtool
## binary is taken from Debian's prometheus package (apt verifies the download): installing the
## package itself would start a Prometheus server and add a system user.
promtool:
	@if ! command -v promtool >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "the alert rules' test needs promtool: sudo make promtool"; exit 1; \
		fi; \
		echo "installing promtool (from Debian's prometheus package) in /usr/local/bin"; \
		dir=$$(mktemp -d) && apt-get update -qq && \
		(cd $$dir && apt-get download -qq -o APT::Sandbox::User=root prometheus) && \
		dpkg-deb --fsys-tarfile $$dir/prometheus_*.deb | tar -xO ./usr/bin/promtool \
			> $$dir/promtool && install -m 755 $$dir/promtool /usr/local/bin/promtool; \
		status=$$?; rm -rf $$dir; exit $$status; \
	fi

## podman: podman, runc and mmdebstrap, which make container-check runs (Debian's packages, as root)
podman:
	@if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 || \
			! command -v mmdebstrap >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "make container-check needs root and podman, runc and mmdebstrap:" \
				"sudo apt-get install podman runc mmdebstrap"; exit 1; \
		fi; \
		echo "installing podman, runc and mmdebstrap"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq podman runc mmdebstrap >/dev/null; \
	fi

## container-check: build the Dockerfile on a local Debian bookworm base and run it with Redis
## and PostgreSQL containers until the quick start's notification is SENT (as root; no registry)
container-check: install podman
	$(BIN)/python -m devtools.container_check

## run: install, then run the whole service against local Redis and PostgreSQL (sandbox provider).
## PORT: the API's port (default: CLARION_PORT if set, else 8000); the default
## CLARION_PUBLIC_URL follows it unless you set one. WORKERS: uvicorn worker processes
## (clarion run --workers; unset: its default).
## E.g. make run PORT=9000 WORKERS=4
PORT ?= $(or $(CLARION_PORT),8000)
WORKERS ?=
run: install
	CLARION_API_KEYS="$${CLARION_API_KEYS:-$(DEV_KEYS)}" \
	CLARION_DIGEST_SECRET="$${CLARION_DIGEST_SECRET:-$(DEV_DIGEST_SECRET)}" \
	CLARION_PORT="$(PORT)" \
	CLARION_PUBLIC_URL="$${CLARION_PUBLIC_URL:-http://127.0.0.1:$(PORT)}" \
	CLARION_LOG_FORMAT="$${CLARION_LOG_FORMAT:-console}" \
	$(SERVICES) -- $(BIN)/clarion run $(if $(WORKERS),--workers $(WORKERS))

## test: install, then lint, type-check, run the default test suite and build the docs strictly
test: install lint typecheck pytest docs-build

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

pytest: install browser nginx promtool
	$(SERVICES) --for tests -- $(BIN)/pytest -m "not chaos"

## docs: serve the docs site at http://127.0.0.1:8001 (beside make run's 8000), rebuilt on every
## change (the configuration and API references are generated from the code at each build)
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

## docs-build: build the docs site into .tmp/site; any warning (a broken link or anchor) fails
docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir .tmp/site

## test-cluster: the integration and end-to-end suites against a private three-master Redis Cluster
test-cluster: install browser
	$(SERVICES) --for tests -- $(BIN)/python -m tests.on_cluster -m "not chaos" tests/integration tests/e2e

## chaos: the long fault-injection runs, kept out of the default suite
chaos: install
	$(BIN)/pytest -m chaos tests/chaos

## bench: measure ingest throughput (needs wrk: apt-get install wrk)
bench: install
	$(BIN)/python bench/ingest.py

## bench-report: every benchmark and the Celery and arq peers, one report in bench/results/
## (needs wrk and valgrind: apt-get install wrk valgrind; a smoke run: REPORT_ARGS=--quick)
bench-report: install
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/report.py $(REPORT_ARGS)

## bench-check: the benchmarks' own test, kept out of the default suite: every configuration
## of the Celery and arq peers of bench/peers.py runs their job on real Redis (installs both
## peers first), bench/schedule.py's arithmetic, and bench/digests.py's with a quick run
bench-check: install
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -c 'from bench.peers import ensure_arq_environment; ensure_arq_environment()'
	$(BIN)/pytest bench/test_peers.py bench/test_schedule.py bench/test_digests.py

## bench-schedule: send later: release and delivery lateness at 10,000 due a second, and the
## Redis bytes a scheduled notification holds (needs Redis; SCHEDULE_ARGS=--quick for a smoke run)
bench-schedule: install
	$(BIN)/python bench/schedule.py $(SCHEDULE_ARGS)

## bench-digests: digests: notifications joined per second at ingest beside a plain type, and
## how late the workers close thousands of due digests (needs Redis and PostgreSQL;
## DIGESTS_ARGS=--quick for a smoke run)
bench-digests: install
	$(BIN)/python bench/digests.py $(DIGESTS_ARGS)

## services-down: stop the private Redis and PostgreSQL a killed make run or make test left running
services-down: install
	$(BIN)/python -m devtools.services down

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
