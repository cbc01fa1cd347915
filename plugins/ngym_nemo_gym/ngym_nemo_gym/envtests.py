"""Run a NeMo Gym environment's own tests the way NeMo Gym's ``gym env test`` runs them, on ngym.

The environment folder is copied into a scratch root as ``<root>/resources_servers/<name>`` (NeMo Gym's repository
layout, so ``from resources_servers.<name>.app import ...`` resolves), and pytest runs from inside that folder
(so ``from app import ...`` resolves) with pytest-asyncio in auto mode. The source folder is never written to.

ngym owns the runner (``ngym.plugin_api``: one definition for ``ngym test``, this package and ``make nemo-envs``);
these are its names here, as this package has always offered them.
"""

from __future__ import annotations

from ngym.plugin_api import EnvTestResult, referenced_environments, run_environment_tests, stage_environment
from ngym.plugin_api import environment_test_report_command as pytest_command

__all__ = ["EnvTestResult", "pytest_command", "referenced_environments", "run_environment_tests", "stage_environment"]
