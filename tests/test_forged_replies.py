"""Forged replies change nothing a worker computes (docs/trust.md, docs/design.md "Tenancy").

Two layers check a reply to a worker: every switch on its path passes a PUSH_ACK, PULL_REPLY
or DONE_ACK only from where its job's PS's traffic arrives (tests/test_packets.py and
tests/test_replies.py test that on both targets), and the worker takes a reply only from the
address and port of the PS shard it asked (hosts/worker.py).

- In process, on loopback (tests/agent_fakes.py's relay, no switch): a relay that forges a
  reply for every request it sees, earlier than the real one, from other addresses and
  ports: wrong values for each PULL, an ack for each PUSH whose first transmission it drops,
  a DONE_ACK before the barrier. The run stays exact; without the worker's check (replaced
  by one that takes any source) the same relay makes it inexact, so the test can fail.
- In Mininet with real switches: a host of another job floods forged PUSH_ACK, PULL_REPLY
  and DONE_ACK at a worker during a short run under loss, with the PS's address and with its
  own; the parameters end bit for bit as the reference computes them, and every forged
  frame that was not lost was dropped by the switch (FOREIGN_REPLY).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contract.codec import CodecError, Message, decode, encode_message
from contract.constants import HOTAGG_PORT, VALUE_SCALE, Op
from hosts.stats import params_sha256
from hosts.workloads import LogisticWorkload, reference_run
from tests.agent_fakes import Relay
from tests.test_agents import check_exact, run_job

Address = tuple[str, int]


class ForgingRelay(Relay):
    """A relay (no loss of its own) that forges replies for the workers' requests, each sent
    before the real reply can arrive, round robin from: 127.0.0.2 (another address), a port
    of the PS's own address 127.0.0.1 that is not the PS's, and another shard's address."""

    def __init__(self, upstreams: list[Address]) -> None:
        super().__init__(upstreams)
        self.forgers = [self._bound("127.0.0.2"), self._bound("127.0.0.1")]
        self.pushes_seen: set[tuple[Address, int]] = set()
        self.turn = 0

    @staticmethod
    def _bound(ip: str) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ip, 0))
        return s

    def stop(self) -> None:
        super().stop()
        for s in self.forgers:
            s.close()

    def _forge(self, m: Message, client: Address, shard: int) -> None:
        others = [s for i, s in enumerate(self.listen) if i != shard]
        senders = [*self.forgers, *others]
        sender = senders[self.turn % len(senders)]
        self.turn += 1
        sender.sendto(encode_message(m), client)
        self.counters[f"forged {Op(m.op).name}"] += 1

    def _emit(self, sock: socket.socket, data: bytes, dest: Address) -> None:
        try:
            m = decode(data)
        except CodecError:
            return super()._emit(sock, data, dest)
        if sock in self.listen:  # a reply to client `dest`
            if m.op == Op.PULL_REPLY and m.keys:
                wrong = tuple(v + VALUE_SCALE for v in m.values)
                self._forge(m._replace(values=wrong, flags=0), dest, self.listen.index(sock))
            return super()._emit(sock, data, dest)
        (client, shard), _ = next((k, s) for k, s in self.clients.items() if s is sock)
        if m.op == Op.PUSH and (client, m.seq) not in self.pushes_seen:
            # "Lost": only a resend reaches the PS, and only if the worker resends.
            self.pushes_seen.add((client, m.seq))
            ack = Message(Op.PUSH_ACK, 0, m.job_id, m.worker_id, m.seq, m.iteration, 0)
            self._forge(ack, client, shard)
            return None
        if m.op == Op.DONE:
            ack = Message(Op.DONE_ACK, 0, m.job_id, m.worker_id, m.seq, m.iteration, 0)
            self._forge(ack, client, shard)
        return super()._emit(sock, data, dest)


def lr_workload() -> LogisticWorkload:
    # Pulled values feed the gradient, so a wrong PULL_REPLY that a worker took shows.
    return LogisticWorkload(key_space=4096, batch=16, seed=11)


def test_a_worker_takes_replies_only_from_the_shard_it_asked(tmp_path: Path) -> None:
    wl = lr_workload()
    params, summaries, results, relay = run_job(wl, 2, 4, tmp_path, relay=ForgingRelay, shards=2)
    check_exact(wl, 2, 4, params, summaries)
    forged = {k: n for k, n in relay.counters.items() if k.startswith("forged")}
    assert forged.keys() == {"forged PUSH_ACK", "forged PULL_REPLY", "forged DONE_ACK"}, forged
    refused = {
        name: sum(r.counters.get(name, 0) for r in results)
        for name in ("replies_from_elsewhere", "replies_from_another_shard")
    }
    assert all(refused.values()), refused


def test_without_the_source_check_the_forged_replies_do_harm(tmp_path: Path, monkeypatch) -> None:
    """The control: the same relay against workers that take a reply from any source."""

    class AnySource(dict):
        def get(self, key, default=None):  # the shard of whatever request the seq names
            return 0

    monkeypatch.setattr("hosts.worker.reply_sources", lambda ps: AnySource())
    wl = lr_workload()
    # One shard: the stand-in's shard is then always the one asked.
    params, summaries, _, relay = run_job(wl, 2, 4, tmp_path, relay=ForgingRelay)
    assert all(s["finished"] for s in summaries) and relay.counters["forged PUSH_ACK"] > 0
    assert not np.array_equal(params, reference_run(wl, 2, 4).params)


# --- in Mininet, with real switches -------------------------------------------------------

JOB, OTHER_JOB = 1, 2
ITERATIONS = 10
WORKER_PORT = 40001
WORKLOAD = ["--workload", "lr", "--keys", "4096", "--batch", "16", "--seed", "11"]


def hot_keys_of(wl: LogisticWorkload, workers: int, n: int) -> list[int]:
    """The n keys the workers pull most often in the first iterations."""
    counts: dict[int, int] = {}
    for t in (1, 2):
        for w in range(workers):
            for k in wl.pull_keys(w, t).tolist():
                counts[k] = counts.get(k, 0) + 1
    return sorted(counts, key=lambda k: -counts[k])[:n]


@pytest.mark.e2e
@pytest.mark.root
@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_a_flood_of_forged_replies_from_another_jobs_host_changes_nothing(
    target: str, tmp_path: Path
) -> None:
    from contract.p4files import P4INFO_PATH
    from controller.client import SwitchClient
    from controller.drop_sim import DropSim
    from controller.forwarding import Forwarding, compute_routes
    from controller.hot_keys import HotKeys
    from controller.jobs import Jobs
    from controller.p4info import P4Info
    from controller.stats import Stats
    from controller.tenancy import Tenancy, admissions_from_topology
    from hosts.stats import write_hot_keys
    from topologies.network import missing_prerequisites, start_network
    from topologies.switches import REPO_ROOT, bmv2_missing
    from topologies.targets import make_target
    from topologies.topology import load_topology

    if why := missing_prerequisites():
        pytest.skip(why)
    if target == "bmv2":
        if why := bmv2_missing():
            pytest.skip(f"BMv2 target: {why}")
        from tests.conftest import bmv2_config

        bmv2_config()  # build/hotagg.json from the current p4src/
    topo = load_topology("star:4")  # h1..h4 workers, h5 the PS, s1 aggregates
    workers, ps, forger = ["h1", "h2", "h3"], topo.hosts["h5"], topo.hosts["h4"]
    kind = make_target(target)
    net = start_network(topo, kind, grpc_base_port=0, intf_prefix=None,
                        log_dir=tmp_path / "logs", seed=1)  # fmt: skip
    procs: list[subprocess.Popen] = []
    try:
        p4info = P4Info.from_file(P4INFO_PATH)
        client = SwitchClient(net.grpc_addrs["s1"], net.device_ids["s1"], wait=10.0).connect()
        client.set_pipeline(p4info.message, kind.device_config())
        Forwarding(client, p4info).install(compute_routes(topo, "s1"))
        job = Jobs(client, p4info).add(JOB, 64)
        Jobs(client, p4info).add(OTHER_JOB, 16)
        tenancy = Tenancy(client, p4info)
        tenancy.admit(admissions_from_topology(topo, "s1", JOB, workers, [ps.name]))
        tenancy.admit(admissions_from_topology(topo, "s1", OTHER_JOB, ["h4"], [ps.name]))
        DropSim(client, p4info).set(0.03)  # lost pushes: a forged ack taken would lose them
        wl = LogisticWorkload(key_space=4096, batch=16, seed=11)
        report = HotKeys(client, p4info).install(job, hot_keys_of(wl, len(workers), 48))
        hot_file = tmp_path / "hot_keys.csv"
        write_hot_keys(hot_file, dict(report.added))
        env = {"PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"}

        def spawn(host: str, module: str, *args: str) -> subprocess.Popen:
            proc = net.host(host).popen(
                [sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            procs.append(proc)
            return proc

        common = ["--iterations", str(ITERATIONS), "--hot-keys", str(hot_file), "--deadline", "120"]
        server = spawn(
            ps.name, "hosts.ps", "--job", str(JOB), "--workers", str(len(workers)),
            "--keys", "4096", "--bind", f"{ps.ip}:{HOTAGG_PORT}", "--collect",
            "--switch", str(topo.service_ip_for(ps.name)), "--hot-slots", "64",
            "--params", str(tmp_path / "params.npy"), "--summary", str(tmp_path / "ps.json"),
            *common,
        )  # fmt: skip
        target_ip = topo.hosts["h1"].ip
        flood = spawn(
            forger.name, "tests.reply_forger", "--iface", net.host(forger.name).defaultIntf().name,
            "--mac", forger.mac, "--sources", f"{ps.ip},{forger.ip}",
            "--to", f"{target_ip}:{WORKER_PORT}", "--job", str(JOB), "--worker-id", "0",
            "--iterations", str(ITERATIONS),
        )  # fmt: skip
        runners = []
        for w, host in enumerate(workers):
            bind = f"{topo.hosts[host].ip}:{WORKER_PORT}"
            runners.append(spawn(
                host, "hosts.worker", "--job", str(JOB), "--worker-id", str(w),
                "--ps", f"{ps.ip}:{HOTAGG_PORT}", "--bind", bind,
                "--summary", str(tmp_path / f"w{w}.json"), *common, *WORKLOAD,
            ))  # fmt: skip
        for proc in (*runners, server):
            out, _ = proc.communicate(timeout=180)
            assert proc.returncode == 0, out[-3000:]
        flood.terminate()
        sent = json.loads(flood.communicate(timeout=10)[0].strip().splitlines()[-1])["sent"]
        stats = {c.name: c.packets for c in Stats(client, p4info).read()}
        client.close()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        net.stop()
    summary = json.loads((tmp_path / "ps.json").read_text())
    reference = reference_run(wl, len(workers), ITERATIONS).params
    assert summary["finished"] and summary["params_sha256"] == params_sha256(reference)
    w0 = json.loads((tmp_path / "w0.json").read_text())["counters"]
    forged = sum(sent.values())
    # The switch dropped every forged frame the drop simulator did not (3% +- noise), so
    # none reached the worker; the run used the switch (its replies passed).
    assert forged > 1000 and stats["FOREIGN_REPLY"] >= 0.9 * forged, (sent, stats)
    assert w0.get("replies_from_elsewhere", 0) == 0, w0
    assert stats["PUSH_SWITCH_ACK"] > 0 and stats["PULL_HIT"] > 0, stats
