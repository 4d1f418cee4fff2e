"""Test-only stand-ins for the network between agents: a seeded lossy UDP relay on loopback
and, optionally, a switch running in it: `FakeSwitch`, a plain model of docs/design.md
section 2 over decoded payloads, or `PipelineSwitch`, the embedded target's own pipeline
(softswitch.pipeline) fed with Ethernet/IPv4/UDP frames. Running the agents through both
shows they stay exact with a switch that follows the design, and that the embedded target
and this reading of the design agree on what the agents see.
"""

from __future__ import annotations

import heapq
import random
import selectors
import socket
import threading
import time
from collections import Counter

from contract.codec import CodecError, decode, decode_frame, encode, encode_frame
from contract.constants import (
    DEDUP_WINDOW,
    FLAG_FROM_SWITCH,
    FLAG_INVALIDATE,
    HOTAGG_PORT,
    INT32_MAX,
    INT32_MIN,
    MAX_ENTRIES,
    MAX_WORKERS,
    NUM_SLOTS,
    REPLY_OP,
    SWITCH_OPS,
    Op,
    Stat,
)
from contract.names import hot_keys_table, set_slot_action

Address = tuple[str, int]
P = "HotaggIngress."


class FakeSwitch:
    """The hotagg pipeline on payloads: process() -> ("reply" | "forward" | "drop", bytes)."""

    def __init__(self, jobs: dict[int, tuple[int, int, int]], hot: dict[int, int]) -> None:
        self.jobs = jobs  # job_id -> (job_index, slot_base, slot_count)
        # per entry position (lookup instance): key -> offset (every job; tests use one job)
        self.hot_at = [dict(hot) for _ in range(MAX_ENTRIES)]
        self.stats: Counter[Stat] = Counter()
        self.dedup: dict[int, tuple[int, int]] = {}
        self.agg: dict[int, list[int]] = {}  # a -> [iteration, key, value]
        self.cache: dict[int, list[int]] = {}  # slot -> [iteration, key, value]
        self.lock = threading.Lock()

    @property
    def hot(self) -> dict[int, int]:
        return self.hot_at[0]

    def set_hot(self, hot: dict[int, int], instances: range = range(MAX_ENTRIES)) -> None:
        """The controller's write: `hot` into the given lookup instances (all: a whole
        update; one: the state half way through a controller's 8 writes)."""
        with self.lock:
            for i in instances:
                self.hot_at[i] = dict(hot)

    def _slot(self, job: tuple[int, int, int], key: int, i: int) -> int | None:
        off = self.hot_at[i].get(key)
        if off is None:
            return None
        if off >= job[2] or job[1] + off >= NUM_SLOTS:
            self.stats[Stat.BAD_SLOT] += 1
            return None
        return job[1] + off

    def process(self, data: bytes, from_client: bool = True) -> tuple[str, bytes]:
        with self.lock:
            return self._process(data)

    def _process(self, data: bytes) -> tuple[str, bytes]:
        try:
            m = decode(data)
        except CodecError:
            self.stats[Stat.MALFORMED] += 1
            return "drop", data
        if not 1 <= m.op <= 10:
            self.stats[Stat.UNKNOWN_OP] += 1
            return "drop", data
        job = self.jobs.get(m.job_id)
        if job is None:
            self.stats[Stat.UNKNOWN_JOB] += 1
            return "drop", data
        if m.op not in SWITCH_OPS:
            self.stats[Stat.PASS] += 1
            return "forward", data
        keys, values, mask = list(m.keys), list(m.values), 0
        if m.op == Op.PUSH:
            if m.seq == 0:
                self.stats[Stat.MALFORMED] += 1
                return "drop", data
            if m.worker_id >= MAX_WORKERS:
                self.stats[Stat.BAD_WORKER] += 1
                return "drop", data
            self.stats[Stat.PUSH] += 1
            d = (job[0] & 15) << 12 | (m.worker_id & 63) << 6 | (m.seq & (DEDUP_WINDOW - 1))
            seen, seen_mask = self.dedup.get(d, (0, 0))
            if seen == m.seq:
                self.stats[Stat.PUSH_DUP] += 1
                mask = seen_mask
            elif seen > m.seq:
                self.stats[Stat.PUSH_STALE] += 1
                return "drop", data
            else:
                for i, (k, v) in enumerate(zip(keys, values)):
                    slot = self._slot(job, k, i)
                    if slot is None:
                        continue
                    a = (m.iteration & 1) * NUM_SLOTS + slot
                    cell = self.agg.get(a)
                    if cell is None or cell[0] != m.iteration:
                        self.agg[a] = [m.iteration, k, v]
                    elif cell[1] == k:
                        if not INT32_MIN <= cell[2] + v <= INT32_MAX:
                            self.stats[Stat.OVERFLOW] += 1
                            continue
                        cell[2] += v
                    else:
                        self.stats[Stat.SLOT_CONFLICT] += 1
                        continue
                    mask |= 1 << i
                    self.stats[Stat.HOT_APPLIED] += 1
                self.dedup[d] = (m.seq, mask)
            if mask == (1 << m.count) - 1:
                self.stats[Stat.PUSH_SWITCH_ACK] += 1
                return "reply", self._out(m, REPLY_OP[Op.PUSH], [], [], mask, FLAG_FROM_SWITCH)
            rest = [i for i in range(m.count) if not mask >> i & 1]
            self.stats[Stat.COLD_FORWARDED] += len(rest)
            ks, vs = [keys[i] for i in rest], [values[i] for i in rest]
            return "forward", self._out(m, Op.PUSH, ks, vs, mask, 0)
        if m.op == Op.PULL:
            self.stats[Stat.PULL] += 1
            for i, k in enumerate(keys):
                slot = self._slot(job, k, i)
                c = self.cache.get(slot) if slot is not None else None
                if c is not None and c[0] == m.iteration and c[1] == k:
                    values[i] = c[2]
                    mask |= 1 << i
            if m.count and mask == (1 << m.count) - 1:
                self.stats[Stat.PULL_HIT] += 1
                return "reply", self._out(m, Op.PULL_REPLY, keys, values, mask, FLAG_FROM_SWITCH)
            self.stats[Stat.PULL_MISS] += 1
            return "forward", self._out(m, Op.PULL, keys, values, mask, 0)
        if m.op == Op.COLLECT:
            self.stats[Stat.COLLECT] += 1
            cached = 0
            for i, (expected, raw_off) in enumerate(zip(m.keys, m.values)):
                off = raw_off & 0xFFFFFFFF
                if not (off < job[2] and job[1] + off < NUM_SLOTS):
                    continue
                slot = job[1] + off
                cell = self.agg.get((m.iteration & 1) * NUM_SLOTS + slot)
                touched = cell is not None and cell[0] == m.iteration
                c = self.cache.get(slot)
                if m.mask >> i & 1 and c is not None and c[1] == expected:
                    if m.flags & FLAG_INVALIDATE:
                        c[0] = 0
                    else:
                        if c[0] == m.iteration:
                            s = cell[2] if touched and cell[1] == expected else 0
                            if -(1 << 31) <= c[2] - s < 1 << 31:
                                c[0], c[2] = m.iteration + 1, c[2] - s
                                self.stats[Stat.CACHE_WRITE] += 1
                        if c[0] == m.iteration + 1:
                            cached |= 1 << i
                if touched:
                    keys[i], values[i] = cell[1], cell[2]
                    mask |= 1 << i
            out = self._out(m, Op.COLLECT_REPLY, keys, values, mask, FLAG_FROM_SWITCH, cached)
            return "reply", out
        self.stats[Stat.WRITEBACK] += 1  # Op.WRITEBACK
        for i, (k, v) in enumerate(zip(keys, values)):
            slot = self._slot(job, k, i)
            if slot is not None:
                self.cache[slot] = [m.iteration, k, v]
                mask |= 1 << i
                self.stats[Stat.CACHE_WRITE] += 1
        return "reply", self._out(m, Op.WRITEBACK_ACK, keys, values, mask, FLAG_FROM_SWITCH)

    def cache_entries(self) -> dict[int, tuple[int, int, int]]:
        """slot -> (iteration tag, key, value) of every tagged cache entry."""
        with self.lock:
            return {slot: (c[0], c[1], c[2]) for slot, c in self.cache.items() if c[0]}

    @staticmethod
    def _out(m, op, keys, values, mask, flags, cached: int = 0) -> bytes:
        return encode(
            op,
            m.job_id,
            m.worker_id,
            m.seq,
            m.iteration,
            keys,
            values,
            flags=m.flags | flags,
            mask=mask,
            cached=cached,
        )


class PipelineSwitch:
    """The embedded target's real pipeline (softswitch.pipeline) behind the same interface:
    payloads are framed as client 10.0.0.1 (port 1) <-> PS 10.0.0.2:18497 (port 2)."""

    CLIENT, PS = ("10.0.0.1", 1, 40000), ("10.0.0.2", 2, HOTAGG_PORT)

    def __init__(
        self,
        job_id: int,
        job: tuple[int, int, int] | None,
        hot: dict[int, int],
        pipeline=None,
    ) -> None:
        """`pipeline`: an existing one (e.g. a P4Runtime server's, whose controller adds the
        job and the hot keys: then `job` is None)."""
        from softswitch.pipeline import Pipeline

        self.p = pipeline if pipeline is not None else Pipeline(seed=1)
        self.job_id, self.lock = job_id, threading.Lock()
        self.hot_at: list[dict[int, int]] = [{} for _ in range(MAX_ENTRIES)]
        addrs = []
        for ip, port, _ in (self.CLIENT, self.PS):
            addr = int.from_bytes(bytes(int(x) for x in ip.split(".")), "big")
            self.p.tables[P + "ipv4_lpm"].insert(((addr, 32),), P + "ipv4_forward", (port, port))
            addrs.append((addr, port))
        if job is not None:
            self.p.tables[P + "jobs"].insert((job_id,), P + "set_job", job)
        # Tenancy: the relay frames every request as CLIENT, a worker's (whatever its id)
        # and the PS's COLLECT and WRITEBACK alike.
        client, client_port = addrs[0]
        admit = P + "admit"
        for worker in range(MAX_WORKERS):
            key = (job_id, worker, client_port, client)
            self.p.tables[P + "worker_admission"].insert(key, admit, ())
        self.p.tables[P + "ps_admission"].insert((job_id, client_port, client), admit, ())
        if hot:
            self.set_hot(hot)

    @property
    def stats(self) -> Counter:
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
        (sip, port, sport), (dip, _, dport) = (
            (self.CLIENT, self.PS) if from_client else (self.PS, self.CLIENT)
        )
        frame = encode_frame(
            data,
            src_mac="02:00:00:00:00:01",
            dst_mac="02:00:00:00:00:fe",
            src_ip=sip,
            dst_ip=dip,
            sport=sport,
            dport=dport,
        )
        with self.lock:
            out = self.p.process(port, frame)
        if not out:
            return "drop", data
        assert len(out) == 1, out
        egress, payload = out[0][0], decode_frame(out[0][1]).payload
        return ("reply" if from_client and egress == 1 else "forward"), payload


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
        switch: FakeSwitch | PipelineSwitch | None = None,
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
