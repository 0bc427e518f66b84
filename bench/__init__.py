"""Benchmarks: each folder is one question; `bench.common` holds the helpers they share."""
