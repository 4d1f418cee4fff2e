"""Cluster (issue #32, steps 1 and 2): the servers list, the preflight, and agents on a host of
another server, against a real second "server" on this machine (tests/cluster_server.py: an
sshd inside a network namespace), so that ssh, multiplexing, tunnels and remote processes
really run; a Mininet host there pings through a local embedded switch over Mininet's SSH
tunnel. The server tests skip with the reason without root, openssh-server or sudo.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from experiment.processes import ProcessDied, Watched, follow, raise_first_death, start_together
from tests.cluster_server import NetnsServer, netns_server_for
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


# --- the remote wrapper, run locally --------------------------------------------------


def local_remote_process(argv: list[str], tmp_path: Path, **popen: Any) -> Any:
    """A RemoteProcess around remote_script run by a local sh: the wrapper and the stderr
    relay without ssh."""
    from topologies.remote import RemoteProcess, remote_script

    script = remote_script(argv, tmp_path, {"HOTAGG_PROBE": "it's $HOME"}, merge=False)
    return RemoteProcess(["sh", "-c", script], Server("nowhere"), **popen)


def test_the_wrapper_keeps_argv_cwd_env_and_the_exit_status(tmp_path: Path) -> None:
    if not cluster.DEBIAN_CLUSTER.exists():
        pytest.skip(f"{cluster.DEBIAN_CLUSTER} is missing (Debian package mininet)")
    code = "import os,sys; print(os.getcwd(), os.environ['HOTAGG_PROBE'], sys.argv[1:]); "
    code += "sys.stderr.write('one\\ntwo without newline'); sys.exit(3)"
    err = tmp_path / "err"
    with open(err, "w") as err_file:
        proc = local_remote_process(
            [PY, "-c", code, "a b", "'q'", "$x"], tmp_path, stdout=subprocess.PIPE,
            stderr=err_file, text=True,
        )  # fmt: skip
    out, _ = proc.communicate(timeout=20)
    assert out == f"{tmp_path} it's $HOME ['a b', \"'q'\", '$x']\n"
    assert proc.returncode == 3 and proc.remote_status == 3 and not proc.connection_lost
    assert proc.remote_pid is not None and proc.remote_pid > 1
    assert err.read_text() == "one\ntwo without newline"  # the marks taken out, nothing else


def test_the_wrapper_reports_a_killed_process_and_a_lost_connection(tmp_path: Path) -> None:
    if not cluster.DEBIAN_CLUSTER.exists():
        pytest.skip(f"{cluster.DEBIAN_CLUSTER} is missing (Debian package mininet)")
    from experiment.processes import exit_description

    proc = local_remote_process(["sh", "-c", "kill -KILL $$"], tmp_path, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL and b"hotagg-" not in err  # sh may say "Killed"
    assert exit_description(proc.returncode) == "was killed by SIGKILL"
    # ssh's own failure: 255 and no exit line from the wrapper
    from topologies.remote import RemoteProcess

    lost = RemoteProcess(
        ["sh", "-c", "echo 'ssh: closed' >&2; exit 255"], Server("nowhere"), stderr=subprocess.PIPE
    )
    assert lost.communicate(timeout=20)[1] == b"ssh: closed\n"
    assert lost.returncode == 255 and lost.connection_lost


# --- the second server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def netns_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsServer]:
    yield from netns_server_for(tmp_path_factory.mktemp("netns-server"))


@pytest.fixture(scope="module")
def remote_host(netns_server: NetnsServer) -> Iterator[Any]:
    from topologies.remote import RemoteHotaggHost

    host = RemoteHotaggHost(f"c{os.getpid() % 100000}r", server=netns_server.address)
    try:
        yield host
    finally:
        host.terminate()


@pytest.mark.root
def test_preflight_passes_on_the_netns_server(netns_server: NetnsServer) -> None:
    report = check_server(Server(netns_server.address), target="bmv2", bmv2_binary=PY)
    assert report.ok, "\n".join(report.lines())
    names = [c.name for c in report.checks]
    assert names == ["ssh", "ssh multiplexing", "sudo", "mnexec", "checkout and venv",
                     "vxlan", "tc u32", "tc mirred", "bmv2"]  # fmt: skip
    # The master connection is there for the later steps' logins.
    check = ["ssh", *cluster.ssh_options(), "-O", "check", f"root@{netns_server.address}"]
    assert subprocess.run(check, capture_output=True, check=False).returncode == 0


@pytest.mark.root
def test_preflight_names_each_missing_piece(netns_server: NetnsServer, tmp_path: Path) -> None:
    wrong_key = check_server(Server(netns_server.wrong_key_address))
    assert [(c.name, c.ok) for c in wrong_key.checks] == [("ssh", False)]
    assert "does not accept this machine's key" in wrong_key.checks[0].detail

    no_sudo = check_server(Server(netns_server.no_sudo_address))
    # Its sessions' PATH has ip but neither sudo nor tc: each missing piece is a line.
    failures = no_sudo.failures()
    assert [c.name for c in failures] == ["sudo", "tc u32", "tc mirred"], "\n".join(no_sudo.lines())
    assert "sudo is not on root's PATH" in failures[0].detail
    for piece in failures[1:]:
        assert "tc: not found" in piece.detail and "cross-server links need" in piece.detail

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


AGENT = textwrap.dedent(
    """
    import os, sys
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    for i in range(1, 4):
        print(f"progress {i}/3", flush=True)
    print("cwd", os.getcwd(), os.environ.get("HOTAGG_RUN"), file=sys.stderr)
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.mark.root
def test_a_remote_agent_speaks_the_line_protocol_and_keeps_its_exit_code(
    remote_host: Any, tmp_path: Path
) -> None:
    err = tmp_path / "agent.err"
    with open(err, "w") as err_file:  # closed at once, as Testbed.spawn does
        proc = remote_host.popen(
            [PY, "-c", AGENT, "0"],
            cwd=tmp_path,
            env={**os.environ, "HOTAGG_RUN": "run32"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
        )
    watched = [Watched("worker 0", proc, err, may_finish=True)]

    def check(when: str) -> None:
        raise_first_death(when, watched)

    start_together("phase", [("worker 0", proc, err)], check)
    follow("phase", [proc], 3, check)
    assert proc.wait(20) == 0 and not proc.connection_lost
    assert err.read_text() == f"cwd {tmp_path} run32\n"

    failing = remote_host.popen([PY, "-c", "import sys; sys.exit(4)"])
    assert failing.wait(20) == 4 and failing.remote_status == 4
    # stderr=STDOUT: the process's stderr joins its stdout there; the marks stay apart
    merged = remote_host.popen(["sh", "-c", "echo out; echo err >&2"], stderr=subprocess.STDOUT)
    assert merged.communicate(timeout=20) == (b"out\nerr\n", None) and merged.returncode == 0


@pytest.mark.root
def test_a_remote_agent_killed_on_its_server_is_a_death(remote_host: Any, tmp_path: Path) -> None:
    err = tmp_path / "agent.err"
    with open(err, "w") as err_file:
        proc = remote_host.popen(["sh", "-c", "echo started >&2; exec sleep 300"], stderr=err_file)
    deadline = time.monotonic() + 10
    while "started" not in err.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.remote_pid is not None
    # The wrapper (the pid it printed) and its child, the agent (the netns server shares
    # this machine's PID namespace, so pgrep here sees the server's processes).
    children = subprocess.run(["pgrep", "-P", str(proc.remote_pid)], capture_output=True,
                              text=True, check=False).stdout.split()  # fmt: skip
    assert len(children) == 1
    kill = f"kill -KILL {children[0]}"
    server = Server(remote_host.serverIP)
    assert subprocess.run([*cluster.ssh_command(server), kill], check=False).returncode == 0
    watched = Watched("worker 3", proc, err)
    deadline = time.monotonic() + 10
    while watched.failed() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(ProcessDied, match=r"worker 3 \(pid \d+\) was killed by SIGKILL"):
        raise_first_death("phase", [watched])
    assert "started" in err.read_text() and "hotagg-" not in err.read_text()


def live_in_group(pgid: int, settle: float = 5.0) -> list[int]:
    """Processes of process group `pgid` still alive once `settle` seconds have passed (or
    fewer if they are gone earlier); zombies do not count, their reaping is not ours."""
    deadline = time.monotonic() + settle
    while True:
        live = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                live.append(int(stat.parent.name))
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.05)


@pytest.mark.root
def test_terminate_reaches_the_remote_process(remote_host: Any) -> None:
    proc = remote_host.popen(["sleep", "301"])
    assert proc._pid_seen.wait(10) and proc.remote_pid is not None
    proc.terminate()
    assert proc.wait(10) == -signal.SIGTERM
    assert not live_in_group(proc.remote_pid)  # nothing left in its process group


@pytest.mark.root
def test_stopping_a_remote_host_ends_what_it_started_there(netns_server: NetnsServer) -> None:
    from topologies.remote import RemoteHotaggHost

    host = RemoteHotaggHost(f"c{os.getpid() % 100000}t", server=netns_server.address)
    try:
        proc = host.popen("sleep 302 && echo never", shell=True)
        assert proc._pid_seen.wait(10) and proc.remote_pid is not None
        assert proc.poll() is None
    finally:
        host.terminate()
    assert proc.returncode is not None
    assert not live_in_group(proc.remote_pid)


@pytest.mark.root
def test_ping_from_a_remote_host_through_a_local_embedded_switch(
    netns_server: NetnsServer, tmp_path: Path
) -> None:
    """h1 here, h2 on the netns server, s1 (the embedded P4 switch) here with the pipeline
    and routes pushed as the controller does; h2's link crosses over Mininet's SSH tunnel."""
    from mininet.net import Mininet

    from contract.p4files import P4INFO_PATH
    from controller.client import SwitchClient
    from controller.forwarding import Forwarding, compute_routes
    from controller.p4info import P4Info
    from topologies.nodes import P4RuntimeSwitch
    from topologies.remote import RemoteHotaggHost
    from topologies.switches import free_tcp_port
    from topologies.topo import HotaggTopo
    from topologies.topology import parse_topology

    tag = f"c{os.getpid() % 100000}"
    h1, h2, s1 = f"{tag}a", f"{tag}b", "s1"
    topology = parse_topology(
        {
            "hosts": {
                h1: {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01", "role": "worker"},
                h2: {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02", "role": "ps"},
            },
            "switches": {s1: {"aggregate": True, "service_ip": "10.0.0.254"}},
            "links": [[h1, f"{s1}-p1", "0ms", 10], [h2, f"{s1}-p2", "0ms", 10]],
        }
    )
    mixin = cluster.load_cluster().RemoteMixin  # the tunnel code asks every node its server
    switch_cls = type("LocalClusterSwitch", (mixin, P4RuntimeSwitch), {})
    topo = HotaggTopo(
        topology, switch_cls=switch_cls, host_cls=RemoteHotaggHost,
        grpc_ports={s1: free_tcp_port()}, intf_prefix=tag, log_dir=tmp_path,
        run_id=f"test-cluster-{tag}", netem=False,
    )  # fmt: skip
    topo.nodeInfo(h2)["server"] = netns_server.address
    remote_link = cluster.load_cluster().RemoteSSHLink
    for _, _, info in topo.links(withInfo=True):
        info["cls"] = remote_link  # a veth where both ends share a server, else a tunnel
    net = Mininet(topo=topo, controller=None, build=False, autoSetMacs=False, waitConnected=False)
    try:
        started = time.monotonic()
        net.build()
        net.start()
        switch = net.get(s1)
        p4info = P4Info.from_file(P4INFO_PATH)
        with SwitchClient(switch.grpc_addr, device_id=switch.device_id, wait=10.0) as client:
            client.set_pipeline(p4info.message, b"")
            Forwarding(client, p4info).install(compute_routes(topology, s1))
        assert net.get(h2).isRemote and not net.get(h1).isRemote
        out = net.get(h1).cmd("ping -c 3 -i 0.2 -W 2 10.0.0.2")
        assert " 0% packet loss" in out, out
        out = net.get(h2).cmd("ping -c 1 -W 2 10.0.0.1")  # and back, from the server
        assert " 0% packet loss" in out, out
        assert time.monotonic() - started < 30
    finally:
        switch_node = net.get(s1)
        switch_node.stop_process()
        net.stop()
    assert "tap9" not in subprocess.run(["ip", "-br", "link"], capture_output=True,
                                        text=True, check=False).stdout  # fmt: skip
