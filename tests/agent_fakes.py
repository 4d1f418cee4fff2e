"""Test-only stand-ins for the network between agents: a seeded lossy UDP relay on loopback
and, optionally, a switch in it: `PipelineSwitch`, the embedded target's own pipeline
(softswitch.pipeline) run in process and fed with Ethernet/IPv4/UDP frames. The relay injects
the faults (loss, duplication, delay, hot-set changes mid-iteration); the switch is the real
one, so no second model of docs/design.md section 2 has to agree with p4src/ and softswitch/
(tests/test_differential.py holds softswitch/ to BMv2 running p4src/).
"""

from __future__ import annotations

import heapq
import ipaddress
import random
import selectors
import socket
import threading
import time
from collections import Counter

from contract.codec import decode_frame
from contract.constants import (
    HOTAGG_PORT,
    MAX_ENTRIES,
    MAX_WORKERS,
    Op,
    Stat,
)
from contract.frames import host_ip, udp_frame
from contract.names import hot_keys_table, set_slot_action
from softswitch.pipeline import Pipeline

Address = tuple[str, int]
P = "HotaggIngress."


class PipelineSwitch:
    """The embedded target's real pipeline (softswitch.pipeline) behind the relay's switch
    interface: payloads are framed as client host 1 (port 1) <-> PS host 2 (port 2)."""

    CLIENT, PS = 1, 2  # hosts, each on the switch port of its number
    CLIENT_SPORT = 40000

    def __init__(
        self,
        job_id: int,
        job: tuple[int, int, int] | None,
        hot: dict[int, int],
        pipeline: Pipeline | None = None,
    ) -> None:
        """`job`: (job_index, slot_base, slot_count); `pipeline`: an existing one (e.g. a
        P4Runtime server's, whose controller adds the job and the hot keys: then `job` is
        None)."""
        self.p = pipeline if pipeline is not None else Pipeline(seed=1)
        self.job_id, self.lock = job_id, threading.Lock()
        self.hot_at: list[dict[int, int]] = [{} for _ in range(MAX_ENTRIES)]
        for host in (self.CLIENT, self.PS):
            addr = (int(ipaddress.IPv4Address(host_ip(host))), 32)
            self.p.tables[P + "ipv4_lpm"].insert((addr,), P + "ipv4_forward", (host, host))
        if job is not None:
            self.p.tables[P + "jobs"].insert((job_id,), P + "set_job", job)
        # Tenancy: the relay frames every request as CLIENT's, a worker's (whatever its id)
        # and the PS's COLLECT and WRITEBACK alike, and the PS's replies as PS's.
        client = int(ipaddress.IPv4Address(host_ip(self.CLIENT)))
        server = int(ipaddress.IPv4Address(host_ip(self.PS)))
        admit = P + "admit"
        for worker in range(MAX_WORKERS):
            key = (job_id, worker, self.CLIENT, client)
            self.p.tables[P + "worker_admission"].insert(key, admit, ())
        self.p.tables[P + "ps_admission"].insert((job_id, self.CLIENT, client), admit, ())
        self.p.tables[P + "ps_admission"].insert((job_id, self.PS, server), admit, ())
        if hot:
            self.set_hot(hot)

    @property
    def stats(self) -> Counter[Stat]:
        return Counter({Stat(i): n for i, n in enumerate(self.p.stats_packets) if n})

    @property
    def hot(self) -> dict[int, int]:
        return self.hot_at[0]

    def set_hot(self, hot: dict[int, int], instances: range = range(MAX_ENTRIES)) -> None:
        """What the controller does: every hot key into the lookup instances (all 8, or
        some: the state half way through the controller's writes)."""
        with self.lock:
            for i in instances:
                t, old = self.p.tables[hot_keys_table(i)], self.hot_at[i]
                for k in set(old) - set(hot):
                    t.delete((self.job_id, k))
                for k, off in hot.items():
                    write = t.modify if k in old else t.insert
                    write((self.job_id, k), set_slot_action(i), (off,))
                self.hot_at[i] = dict(hot)

    def cache_entries(self) -> dict[int, tuple[int, int, int]]:
        """slot -> (iteration tag, key, value) of every tagged cache entry (the registers)."""
        p = self.p
        with self.lock:
            return {
                slot: (tag, p.cache_key[slot], p.cache_value[slot])
                for slot, tag in enumerate(p.cache_iter)
                if tag
            }

    def process(self, data: bytes, from_client: bool = True) -> tuple[str, bytes]:
        """One payload through the pipeline: ("reply" | "forward" | "drop", payload out)."""
        if from_client:
            frame = udp_frame(
                self.CLIENT, self.PS, data, sport=self.CLIENT_SPORT, dport=HOTAGG_PORT
            )
        else:
            frame = udp_frame(
                self.PS, self.CLIENT, data, sport=HOTAGG_PORT, dport=self.CLIENT_SPORT
            )
        with self.lock:
            out = self.p.process(self.CLIENT if from_client else self.PS, frame)
        if not out:
            return "drop", data
        assert len(out) == 1, out
        egress, payload = out[0][0], decode_frame(out[0][1]).payload
        return ("reply" if from_client and egress == self.CLIENT else "forward"), payload


class Relay(threading.Thread):
    """One listen socket per upstream (PS shard): clients send to `addrs[i]`, the relay
    forwards to upstream i from a per-client socket and relays the answers back. Every
    datagram can be dropped (on the way in and out), duplicated and delayed (so reordered),
    seeded. With a `switch`, datagrams from clients and from upstreams go through it first;
    a PS sends COLLECT/WRITEBACK to any listen address and gets the switch's reply."""

    def __init__(
        self,
        upstreams: list[Address],
        *,
        drop: float = 0.0,
        dup: float = 0.0,
        delay: float = 0.0,
        seed: int = 0,
        switch: PipelineSwitch | None = None,
        hot_schedule: list[dict[int, int]] | None = None,
        rotate_every: int = 0,
        stagger: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self.upstreams, self.switch = upstreams, switch
        self.drop, self.dup, self.delay = drop, dup, delay
        self.rng = random.Random(seed)
        self.hot_schedule, self.rotate_every, self.rotations = hot_schedule or [], rotate_every, 0
        # stagger: each rotation rewrites one lookup instance only (the next in turn), so the
        # entry positions of a packet see different hot sets, as while a controller writes
        self.stagger = stagger
        self.applied_at: Counter[int] = Counter()  # entry position -> PUSH entries summed
        self.counters: Counter[str] = Counter()
        self.sel = selectors.DefaultSelector()
        self.listen = []
        for i in range(len(upstreams)):
            s = self._socket()
            self.sel.register(s, selectors.EVENT_READ, ("listen", i))
            self.listen.append(s)
        self.addrs: list[Address] = [s.getsockname() for s in self.listen]
        self.clients: dict[tuple[Address, int], socket.socket] = {}
        self.queue: list[tuple[float, int, socket.socket, bytes, Address]] = []
        self._n = 0
        self._halt = threading.Event()

    @staticmethod
    def _socket() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        s.bind(("127.0.0.1", 0))
        return s

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        for s in [*self.listen, *self.clients.values()]:
            s.close()

    def _emit(self, sock: socket.socket, data: bytes, dest: Address) -> None:
        if self.rng.random() < self.drop:
            self.counters["dropped"] += 1
            return
        copies = 2 if self.rng.random() < self.dup else 1
        self.counters["duplicated"] += copies - 1
        for _ in range(copies):
            self._n += 1
            at = time.monotonic() + self.rng.random() * self.delay
            heapq.heappush(self.queue, (at, self._n, sock, data, dest))

    def _through_switch(self, data: bytes, from_client: bool) -> tuple[str, bytes]:
        if self.switch is None:
            return "forward", data
        if self.rotate_every and self.hot_schedule and data[1:2] == bytes([Op.PUSH]):
            self.counters["pushes"] += 1
            if self.counters["pushes"] % self.rotate_every == 0:
                self.rotations += 1
                if self.stagger:
                    n = self.rotations
                    hot = self.hot_schedule[(n // MAX_ENTRIES) % len(self.hot_schedule)]
                    self.switch.set_hot(hot, range(n % MAX_ENTRIES, n % MAX_ENTRIES + 1))
                else:
                    self.switch.set_hot(self.hot_schedule[self.rotations % len(self.hot_schedule)])
        action, out = self.switch.process(data, from_client)
        if from_client and data[1:2] == bytes([Op.PUSH]) and out[1] in (Op.PUSH, Op.PUSH_ACK):
            mask = out[16]  # header byte 16: the applied-entries bitmap
            for i in range(MAX_ENTRIES):
                self.applied_at[i] += mask >> i & 1
        return action, out

    def run(self) -> None:
        while not self._halt.is_set():
            now = time.monotonic()
            while self.queue and self.queue[0][0] <= now:
                _, _, sock, data, dest = heapq.heappop(self.queue)
                try:
                    sock.sendto(data, dest)
                except OSError:
                    self.counters["send_errors"] += 1
            timeout = 0.05 if not self.queue else max(0.0, self.queue[0][0] - now)
            for key, _ in self.sel.select(timeout):
                sock = key.fileobj
                try:
                    data, src = sock.recvfrom(4096)
                except OSError:
                    continue
                if self.rng.random() < self.drop:  # lost on the way in
                    self.counters["dropped"] += 1
                    continue
                role, idx = key.data
                action, out = self._through_switch(data, role == "listen")
                if action == "drop":
                    continue
                if role == "listen":
                    if action == "reply":
                        self._emit(sock, out, src)
                        continue
                    up = self.clients.get((src, idx))
                    if up is None:
                        up = self.clients[(src, idx)] = self._socket()
                        self.sel.register(up, selectors.EVENT_READ, ("up", (src, idx)))
                    self._emit(up, out, self.upstreams[idx])
                else:  # from an upstream PS back to its client
                    client, i = idx
                    self._emit(self.listen[i], out, client)
