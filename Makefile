# The two commands a newcomer needs:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
WHEELHOUSE := $(VENV)/wheelhouse/.complete

.PHONY: run test setup lint typecheck coverage unit bench clean image-test compiled-test

$(STAMP): pyproject.toml
	@PYTHON=$(PYTHON) sh scripts/check_prereqs.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

## The runtime dependencies' wheels, for the plain-install test (tests/deploy/test_wheel.py).
$(WHEELHOUSE): pyproject.toml scripts/runtime_wheelhouse.sh $(STAMP)
	sh scripts/runtime_wheelhouse.sh
	touch $(WHEELHOUSE)

## Debian tools the tests drive: redis-server (shared state), promtool (metrics and rules),
## chromium and its driver (the status page), podman (podman-compose config checks the compose
## file through it; image-test adds buildah, runc and the rest to build and run containers).
setup: $(STAMP) $(WHEELHOUSE)
	sh scripts/install_debian_packages.sh redis-server=redis-server redis-cli=redis-tools \
		promtool=prometheus chromium=chromium chromedriver=chromium-driver openssl=openssl \
		podman=podman
	PYTHON=$(PYTHON) sh scripts/install_deploy_tools.sh

## Run the embedded default: the gateway in front of an emulated three-region fleet.
## `make run PORT=9090` listens elsewhere; `CONFIG=my-gateway.yaml` serves your own config.
run: $(STAMP)
	$(BIN)/meridian serve $(if $(PORT),--port $(PORT)) $(if $(CONFIG),--config $(CONFIG))

## Install everything the tests need, then lint, type-check and run the whole suite.
test: setup lint typecheck coverage unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

## routing/ is pure decision logic: every branch of it is exercised by its own tests.
coverage: $(STAMP)
	$(BIN)/pytest -q tests/routing --cov=routing --cov-branch --cov-report=term-missing:skip-covered --cov-fail-under=100

## MERIDIAN_DEPLOY_TOOLS=required: after setup, a missing deploy tool fails its test (no skip).
unit: $(STAMP)
	MERIDIAN_DEPLOY_TOOLS=required $(BIN)/pytest

## Build the container image (podman, debootstrap base, no network) and test it; .ci/run runs it.
## Needs what setup installs too (podman-compose in .venv-deploy/), so it also runs alone.
image-test: setup
	sh scripts/image_test.sh

## The opt-in compiled build (MERIDIAN_COMPILE=1, routing/compiled_modules.py): build its wheel and
## run the routing, simulator and gateway tests against its extensions; .ci/run runs it.
compiled-test: $(STAMP)
	sh scripts/compiled_test.sh

## Gateway overhead benchmark (not part of the tests): direct vs through the gateway.
bench: $(STAMP)
	$(BIN)/python -m loadtests.bench_overhead

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
