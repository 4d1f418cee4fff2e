"""Benchmarks that write JSON (`make bench`); nothing here asserts on time."""
