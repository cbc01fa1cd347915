"""ngym-verifiers: verifiers environments served as ngym resources servers (see README.md)."""
