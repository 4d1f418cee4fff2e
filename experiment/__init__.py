"""The `make run` experiment: offloaded against server-only latency on one workload."""
