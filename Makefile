# ngym — targets a newcomer can guess. Everything runs inside .venv (made on first use).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
NGYM   := $(VENV)/bin/ngym
# Every environment and plugin is its own pip package: install them all, editable.
PACKAGES := $(sort $(dir $(wildcard resources_servers/*/pyproject.toml plugins/*/pyproject.toml)))

.PHONY: install demo test test-fast conformance fuzz lint typecheck format bench clean docker-base nemo-envs nemo-ci

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(PY)
	$(PIP) install --quiet -e '.[dev]' $(foreach p,$(PACKAGES),-e ./$(p))
	@$(NGYM) --version

demo: install
	$(PY) -m ngym.demo

test: install
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -m "not fuzz" --ignore=tests/conformance

# NeMo Gym 0.7.0's own client, checkers and fixtures against every built-in environment (served as processes).
# NeMo Gym lives in its own cached Python 3.13 venv (tools/nemo_venv.sh; NGYM_NEMO_VENV to put it elsewhere).
conformance: install
	bash tools/nemo_venv.sh
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q tests/conformance tests/unit/test_reward_profile.py

# Schemathesis against every built-in server (real processes): no unexpected 5xx. A few minutes on 2 cores;
# NGYM_FUZZ_EXAMPLES / NGYM_FUZZ_STEPS / NGYM_FUZZ_SEED change the budget and the seed.
fuzz: install
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -m fuzz tests/fuzz

test-fast: install
	$(PY) -m pytest -q tests/unit

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .

bench: install
	@for script in bench/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache

# --- containerize (issue 4): a local base image with Python from Debian packages, for offline builds ---
docker-base:
	bash docker/build-base-image.sh $(TAG)

# --- NeMo Gym's environments (issue 14): all 145 measured under NeMo Gym 0.7.0 and ngym → docs/nemo-gym-environments.md
# Resumable (results cached per environment in ~/.cache/ngym/nemo-envs); ARGS="--only a,b --side ngym --limit 20".
nemo-envs: install
	$(PY) tools/nemo_envs.py $(ARGS)
# 25 of them in CI: install → own tests → serve → replay, rewards compared with NeMo Gym's (tools/nemo_ci_expected.json).
nemo-ci: install
	$(PY) tools/nemo_ci.py
