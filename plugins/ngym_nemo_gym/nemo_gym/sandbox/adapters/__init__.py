"""Ways to run several sandboxes together: ``AsyncSandboxCompose`` (Compose files, on Docker Compose)."""
