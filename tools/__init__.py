"""Tooling behind make targets (cached venvs, sweeps, NeMo Gym CI): a package so its modules import each other."""
