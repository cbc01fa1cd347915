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
# $(call quietly,CMD): pip's own output (dozens of lines, one setuptools warning per editable package) goes to
# $(LOG), a progress line (pip's latest) after $(PROGRESS_SECONDS) s and then at twice the interval each time (15, 45,
# 105, 225 s: a few lines for a five-minute install), the log's tail on failure. `make install V=1` shows it all.
PROGRESS_SECONDS ?= 15
quietly = $(if $(V),$(1),( t=0; s=$(PROGRESS_SECONDS); while sleep $$s >/dev/null 2>&1; do t=$$((t + s)); s=$$((s * 2)); \
	echo "make:   … $${t}s: $$(grep -v '^WARNING' $(LOG) | tail -n 1 | cut -c1-80)"; done ) & \
	ticker=$$!; $(1) >>$(LOG) 2>&1; rc=$$?; kill $$ticker; \
	if [ $$rc != 0 ]; then tail -n 25 $(LOG); echo "make: pip failed (exit $$rc); full log: $(LOG)"; exit $$rc; fi)

.PHONY: trainers trainers-verl install demo test test-fast conformance fuzz lint typecheck format bench bench-table bench-catalogue clean docker-base nemo-envs nemo-ci fleet-ray fleet-e2e-1000 fleet-compose soak verifiers-versions openenv-sweep verifiers-sweep ors protocol-matrix

$(PY):
	@echo "make: creating $(VENV) ($$($(PYTHON) --version))"
	@$(PYTHON) -m venv $(VENV)
	@: > $(LOG)
	@$(call quietly,$(PIP) install --quiet --progress-bar off --upgrade pip)

$(STAMP): $(PYPROJECTS) | $(PY)
	@echo "make: installing ngym + $(words $(PACKAGES)) packages into $(VENV), editable (a minute or a few; log: $(LOG))"
	@: > $(LOG)
	@$(call quietly,$(PIP) install --progress-bar off -e '.[dev]' $(foreach p,$(PACKAGES),-e ./$(p)))
	@touch $@

install: $(STAMP)
	@echo "make: $$($(NGYM) --version) installed in $(VENV) (reinstalls when a pyproject.toml changes)"

demo: install
	@$(PY) -m ngym.demo

# -rs: every skipped test is listed with its reason (CI=true runs them all; see README "Tests"); --durations=25: the
# slowest 25 tests, where the time of the longest CI stage goes.
test: install
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs --durations=25 -m "not fuzz" --ignore=tests/conformance --ignore=tests/cluster --ignore=tests/ors \
	  --ignore=plugins/ngym_openenv/tests/test_commands.py --ignore=plugins/ngym_ors/tests/test_ors_install.py \
	  --ignore=tests/docker/test_fleet_compose_nemo.py --ignore=tests/verl --ignore=tests/trainers

# NeMo Gym 0.7.0's own client, checkers and fixtures against every built-in environment (served as processes).
# NeMo Gym lives in its own cached Python 3.13 venv (tools/nemo_venv.sh; NGYM_NEMO_VENV to put it elsewhere).
conformance: install
	bash tools/nemo_venv.sh
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs -m "not verifiers_versions" tests/conformance tests/unit/test_reward_profile.py tests/unit/test_repeat_metrics.py \
	  plugins/ngym_openenv/tests/test_commands.py

# The trainers and client SDKs below live in one cached Python 3.12 venv (tools/trainer_venv.sh, keyed on
# tools/trainer-requirements.txt: TRL 1.16.0, verl 0.9.1, skyrl-gym 0.4.0, openreward 0.1.167, torch; ~6 GB and ~8 min
# the first time, then reused; NGYM_TRAINER_VENV to put it elsewhere). The tests run them there as subprocesses.
TRAINER_VENV := bash tools/trainer_venv.sh >/dev/null

# RL trainers' own code training on ngym environments (tests/trainers: TRL's GRPOTrainer through ngym.train.trl,
# served by `ngym run` and by a fleet); NeMo Gym's example environment comes from its cached wheel.
trainers: install
	$(TRAINER_VENV)
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs tests/trainers

# verl 0.9.1's tool classes, config loader and ToolAgentLoop, and skyrl-gym 0.4.0's make/step loop, against
# environments served by ngym run (docs/training.md).
trainers-verl: install
	$(TRAINER_VENV)
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs tests/verl tests/unit/test_train_tool_schemas.py

# The Open Reward Standard front (/ors) driven by ORS's own client (openreward 0.1.167) and TRL's OpenRewardSpec
# against every built-in, rewards compared with NeMo Gym's wire. Also `ngym install ors:<folder | distribution>`
# (plugins/ngym_ors/tests): an ORS environment in its own venv (~/.cache/ngym/ors/venvs, a minute the first time),
# served by ngym and compared with openreward's own client and server run in that venv.
ors: install
	$(TRAINER_VENV)
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs tests/ors plugins/ngym_ors/tests

# The environment × protocol table of docs/training.md: a sample of environments served by `ngym run`, their recorded
# rollouts replayed over NeMo's wire, MCP, ORS and OpenEnv (~15 min; installs once). ARGS="--only mcqa,calendar"; the
# table is rewritten with ARGS=--docs. `make ors` re-measures two of its rows.
protocol-matrix: install
	$(TRAINER_VENV)
	$(PY) tools/protocol_matrix.py $(ARGS)

# verifiers 0.1.14, 0.2.0, 0.2.1 and 0.3.0 (0.3.1 and 0.4.0 are in conformance): the same load_environment module served by
# each, scored by verifiers itself and through ngym. Outside CI: each release is a venv of its own (minutes, cached).
verifiers-versions: install
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs -m verifiers_versions tests/conformance

# Every environment folder of an OpenEnv checkout: install → validate → rollout (no --data) → OpenEnv's own
# client side by side with ngym. Outside CI (a virtualenv per environment: minutes each; results cached per folder in
# ~/.cache/ngym/openenv-sweep/results). OPENENV=/path/to/OpenEnv (a checkout or clone); ARGS="--only echo_env,maze_env".
openenv-sweep: install
	@test -n "$(OPENENV)" || { echo "make openenv-sweep OPENENV=/path/to/OpenEnv (a checkout or a clone of huggingface/OpenEnv)"; exit 2; }
	if [ -d "$(OPENENV)/envs" ]; then $(PY) tools/openenv_sweep.py --envs "$(OPENENV)/envs" $(ARGS); \
	else $(PY) tools/openenv_sweep.py --git "$(OPENENV)" $(ARGS); fi

# Other verifiers environments, each installed, validated and scored side by side with verifiers' own scoring
# (tools/verifiers_sweep.py; the table in docs/coming-from-verifiers.md). Outside CI: a venv per requirement set.
# VF_SOURCES: folders (e.g. a checkout's environments/*/), .py modules or distributions on the package index.
VF_SOURCES ?=
verifiers-sweep: install
	@test -n "$(VF_SOURCES)" || { echo "make verifiers-sweep VF_SOURCES='path/to/verifiers/environments/*/ some-dist'"; exit 2; }
	NGYM_STRICT_PLUGINS=1 $(PY) tools/verifiers_sweep.py $(VF_SOURCES)

# Schemathesis against every built-in server (real processes): no unexpected 5xx. A few minutes on 2 cores;
# NGYM_FUZZ_EXAMPLES / NGYM_FUZZ_STEPS / NGYM_FUZZ_SEED change the budget and the seed.
fuzz: install
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs -m fuzz tests/fuzz

# A fleet on a real Ray cluster (ray start --head + 2 worker nodes, one killed mid-run): installs ngym[ray] (~80 MB).
# tests/cluster/test_fleet_e2e.py is the end-to-end fleet check (5 environments over namespace hosts and a Redis
# host, NeMo Gym's collector and `ngym profile` at NGYM_E2E_USERS concurrent users, default 100); -rP prints its
# counts. fleet-e2e-1000 runs it at 1,000 concurrent users (not in CI: ~5 minutes, ~4.5 GB more memory here).
# Also replicas behind the head node's HAProxy and nemo-gym:code_gen's Ray tasks (~2 min; its venv once, ~40 s).
fleet-ray: install
	$(PIP) install --quiet 'ray>=2.40'
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs -rP tests/cluster

fleet-e2e-1000: install
	$(PIP) install --quiet 'ray>=2.40'
	NGYM_E2E_USERS=1000 NGYM_E2E_SECONDS=60 NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs -rP tests/cluster/test_fleet_e2e.py

# A compose fleet with a nemo-gym: entry (its venv, its image from the host-built wheelhouse, its Compose project):
# a few minutes (the wheelhouse), so not in `make test`; needs the Docker engine (bash docker/ci-setup.sh).
fleet-compose: install
	NGYM_STRICT_PLUGINS=1 $(PY) -m pytest -q -rs tests/docker/test_fleet_compose_nemo.py

# A fleet under churn for SOAK_SECONDS (default 1800) at SOAK_SESSIONS concurrent sessions (default 1000): RSS,
# open files and live sessions must stay flat after warm-up, 0 wrong rewards. Not in CI (it takes 30 minutes).
SOAK_SECONDS ?= 1800
SOAK_SESSIONS ?= 1000
soak: install
	$(PY) tools/fleet_soak.py --seconds $(SOAK_SECONDS) --sessions $(SOAK_SESSIONS)

test-fast: install
	$(PY) -m pytest -q -rs tests/unit

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy --strict over ngym/, plugins/ngym_*/, resources_servers/, bench/ and tools/ in one run ([tool.mypy] files in pyproject.toml);
# its cache in .mypy_cache keeps a rerun under a second.
typecheck: install
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .

bench: install
	@for script in bench/bench_*.py; do [ $$script = bench/bench_table.py ] && continue; echo "== $$script"; $(PY) $$script || exit 1; done

# docs/performance.md's tables rerun side by side, printed as markdown (~15 min once bench_heavy's venvs exist)
bench-table: install
	$(PY) bench/bench_table.py

# NeMo Gym's catalogue beyond the table above: ~25 environments side by side with NeMo Gym 0.7.0 (~15 min once
# their venvs exist; the first run installs them, ~10 min), and the reason for each that cannot run here
bench-catalogue: install
	$(PY) bench/bench_catalogue.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache

# --- containerize: a local base image with Python from Debian packages, for offline builds ---
docker-base:
	bash docker/build-base-image.sh $(TAG)

# --- NeMo Gym's environments: all 145 measured under NeMo Gym 0.7.0 and ngym → docs/nemo-gym-environments.md
# Resumable (results cached per environment in ~/.cache/ngym/nemo-envs; NeMo Gym's venv from tools/nemo_venv.sh); ARGS="--only a,b --side ngym --limit 20".
nemo-envs: install
	$(PY) tools/nemo_envs.py $(ARGS)
# 25 of them in CI: install → own tests → serve → replay, rewards compared with NeMo Gym's (tools/nemo_ci_expected.json);
# then 2 (seed/verify and Gymnasium-style) through ngym containerize --run and ngym profile (tools/nemo_ci_deploy.py).
nemo-ci: install
	$(PY) tools/nemo_ci.py
