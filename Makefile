# ngym — targets a newcomer can guess. Everything runs inside .venv (made on first use).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
NGYM   := $(VENV)/bin/ngym
# Every environment and plugin is its own pip package: install them all, editable.
PACKAGES := $(sort $(dir $(wildcard resources_servers/*/pyproject.toml plugins/*/pyproject.toml)))
# `make install` reinstalls only when a pyproject.toml changed (or a package was added): the stamp is newer than all.
STAMP    := $(VENV)/.ngym-installed
LOG      := $(VENV)/install.log
PYPROJECTS := pyproject.toml $(addsuffix pyproject.toml,$(PACKAGES))
# pip's own output (dozens of lines, one setuptools warning per editable package) goes to $(LOG); `make install V=1`
# shows it. On failure the log's tail is printed.
QUIET    = $(if $(V),,>>$(LOG) 2>&1 || { tail -n 25 $(LOG); echo "make: pip failed; full log: $(LOG)"; exit 1; })

.PHONY: install demo test test-fast lint format bench clean docker-base

$(PY):
	@echo "make: creating $(VENV) ($$($(PYTHON) --version))"
	@$(PYTHON) -m venv $(VENV)
	@: > $(LOG)
	@$(PIP) install --quiet --upgrade pip $(QUIET)

$(STAMP): $(PYPROJECTS) | $(PY)
	@echo "make: installing ngym + $(words $(PACKAGES)) packages into $(VENV), editable (about a minute; log: $(LOG))"
	@: > $(LOG)
	@$(PIP) install -e '.[dev]' $(foreach p,$(PACKAGES),-e ./$(p)) $(QUIET)
	@touch $@

install: $(STAMP)
	@echo "make: $$($(NGYM) --version) installed in $(VENV) (reinstalls when a pyproject.toml changes)"

demo: install
	@$(PY) -m ngym.demo

# -rs: every skipped test is listed with its reason (CI=true runs them all; see README "Tests").
test: install
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs

test-fast: install
	$(PY) -m pytest -q -rs tests/unit

lint: install
	$(VENV)/bin/ruff check .

format: install
	$(VENV)/bin/ruff format .

bench: install
	@for script in bench/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache

# --- containerize (issue 4): a local base image with Python from Debian packages, for offline builds ---
docker-base:
	bash docker/build-base-image.sh $(TAG)
