"""NeMo Gym's test helpers that environments' own tests import."""
