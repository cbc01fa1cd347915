"""Benchmarks (``make bench``; docs/performance.md): a package so its modules import each other by name."""
