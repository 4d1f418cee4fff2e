"""Cluster (issue #32, step 1): the servers list and the preflight, against a real second
"server" on this machine (tests/cluster_server.py: an sshd inside a network namespace), so that
ssh, multiplexing and tunnels really run. The server tests skip with the reason without root,
openssh-server or sudo.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_server import NetnsServer, server_missing
from topologies import cluster
from topologies.cluster import ClusterError, Server, check_server, parse_servers

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable  # the venv's python: at the same path on the netns server

# --- the servers list -----------------------------------------------------------------


def test_servers_list_puts_the_coordinator_first() -> None:
    assert parse_servers("host1,alice@10.0.0.2") == [
        Server("localhost"),
        Server("host1", "root"),
        Server("10.0.0.2", "alice"),
    ]
    assert parse_servers(["localhost,h2", "h3"]) == [
        Server("localhost"),
        Server("h2"),
        Server("h3"),
    ]
    assert str(parse_servers("127.0.0.1")[0]) == "localhost"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("h1,,h2", "empty server"),
        ("h1;reboot", "bad server 'h1;reboot'"),
        ("Root@h1", "bad user"),
        ("h1,localhost", "comes first"),
        ("h1,root@h1", "listed twice"),
    ],
)
def test_a_bad_servers_list_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(ClusterError, match=says) as e:
        parse_servers(text)
    assert "\n" not in str(e.value)


def test_the_cli_refuses_a_bad_server_before_any_check(capsys: pytest.CaptureFixture) -> None:
    assert cluster.main(["check", "h1;x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cluster: bad server 'h1;x'") and err.count("\n") == 1


def test_cluster_edition_loads_from_debian_or_names_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not cluster.DEBIAN_CLUSTER.exists():
        pytest.skip(f"{cluster.DEBIAN_CLUSTER} is missing (Debian package mininet)")
    module = cluster.load_cluster()
    assert module.__file__ == str(cluster.DEBIAN_CLUSTER)
    assert sys.modules["mininet.examples.cluster"] is module and module.RemoteMixin
    monkeypatch.setattr(cluster, "DEBIAN_CLUSTER", Path("/nonexistent/cluster.py"))
    with pytest.raises(ClusterError, match="apt-get install --no-install-recommends mininet"):
        cluster.load_cluster()
    assert sys.modules["mininet.examples.cluster"] is module  # left as it was


# --- the second server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def netns_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsServer]:
    if why := server_missing():
        pytest.skip(why)
    if not cluster.DEBIAN_CLUSTER.exists():
        pytest.skip(f"{cluster.DEBIAN_CLUSTER} is missing (Debian package mininet)")
    server = NetnsServer(tmp_path_factory.mktemp("netns-server"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.mark.root
def test_preflight_passes_on_the_netns_server(netns_server: NetnsServer) -> None:
    report = check_server(Server(netns_server.address), target="bmv2", bmv2_binary=PY)
    assert report.ok, "\n".join(report.lines())
    names = [c.name for c in report.checks]
    assert names == ["ssh", "ssh multiplexing", "sudo", "mnexec", "checkout and venv",
                     "cross-server links", "bmv2"]  # fmt: skip
    links = next(c for c in report.checks if c.name == "cross-server links")
    assert "ssh tunnel: ok" in links.detail
    # The master connection is there for the later steps' logins.
    check = ["ssh", *cluster.ssh_options(), "-O", "check", f"root@{netns_server.address}"]
    assert subprocess.run(check, capture_output=True, check=False).returncode == 0


@pytest.mark.root
def test_preflight_names_each_missing_piece(netns_server: NetnsServer, tmp_path: Path) -> None:
    wrong_key = check_server(Server(netns_server.wrong_key_address))
    assert [(c.name, c.ok) for c in wrong_key.checks] == [("ssh", False)]
    assert "does not accept this machine's key" in wrong_key.checks[0].detail

    no_sudo = check_server(Server(netns_server.no_sudo_address))
    assert [c.name for c in no_sudo.failures()] == ["sudo"], "\n".join(no_sudo.lines())
    assert "sudo is not on root's PATH" in no_sudo.failures()[0].detail
    links = next(c for c in no_sudo.checks if c.name == "cross-server links")
    assert "ssh tunnel: Tunnel forwarding failed" in links.detail  # PermitTunnel no there

    nowhere = tmp_path / "no-checkout"
    moved = check_server(Server(netns_server.address), checkout=nowhere)
    assert [c.name for c in moved.failures()] == ["checkout and venv"]
    assert f"{nowhere} does not exist on {netns_server.address}" in moved.failures()[0].detail

    no_bmv2 = check_server(Server(netns_server.address), target="bmv2", bmv2_binary=str(nowhere))
    assert [c.name for c in no_bmv2.failures()] == ["bmv2"]


@pytest.mark.root
def test_the_cli_checks_every_server(
    netns_server: NetnsServer, capsys: pytest.CaptureFixture
) -> None:
    servers = f"{netns_server.address},{netns_server.wrong_key_address}"
    assert cluster.main(["check", servers]) == 1
    out = capsys.readouterr().out
    assert "localhost (coordinator):" in out and f"root@{netns_server.address}:" in out
    assert f"FAIL  ssh: root@{netns_server.wrong_key_address} does not accept" in out
    with pytest.raises(ClusterError, match=f"root@{netns_server.wrong_key_address}: ssh: "):
        cluster.preflight(parse_servers(servers))
