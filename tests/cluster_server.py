"""The second "server" for the cluster tests: topologies/netns_server.py's NetnsServer, started
for a test module and stopped after it (`netns_server_for`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from topologies.netns_server import NetnsServer, server_missing

__all__ = ["NetnsServer", "netns_server_for", "server_missing"]


def netns_server_for(workdir: Path) -> Iterator[NetnsServer]:
    """A started NetnsServer in `workdir`, stopped afterwards, for a test module's fixture
    (`yield from`); skips the module with the reason where it cannot be built."""
    import pytest

    from topologies.cluster import DEBIAN_CLUSTER

    if why := server_missing():
        pytest.skip(why)
    if not DEBIAN_CLUSTER.exists():
        pytest.skip(f"{DEBIAN_CLUSTER} is missing (Debian package mininet)")
    server = NetnsServer(workdir)
    try:
        yield server.start()
    finally:
        server.stop()
