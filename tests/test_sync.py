"""Consistency modes (docs/design.md section 8): `--sync bsp | ssp:S | async`.

- The PS's pacing, against scripted workers on raw UDP sockets: when DONE_ACK leaves, when a
  pull is answered or held, and the staleness it records.
- Whole jobs of real workers through the embedded pipeline (tests/agent_fakes.py) with one
  worker made slow by the relay: conservation (the final parameters equal a PS-alone run of
  the same updates, bit for bit), under loss and duplication too, and the switch refusing
  (SLOT_BUSY) what it cannot hold instead of overwriting an unread copy.
"""

from __future__ import annotations

import heapq
import json
import socket
import threading
import time

import numpy as np
import pytest

from contract.codec import decode, encode
from contract.constants import Op, Stat
from hosts.agent import AgentError
from hosts.ps import ParameterServer
from hosts.ps import main as ps_main
from hosts.ps_config import PSConfig, SyncMode
from hosts.workloads import ZipfWorkload
from tests.agent_fakes import Relay
from tests.test_agents import HOT_SLOTS, _switch, check_exact, make_switch, run_job

JOB = 7


# --- the mode itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,bound,name",
    [("bsp", 0, "bsp"), ("ssp:0", 0, "bsp"), ("SSP:3", 3, "ssp:3"), ("async", None, "async")],
)
def test_sync_modes_parse(text, bound, name) -> None:
    mode = SyncMode.parse(text)
    assert mode.bound == bound and str(mode) == name


@pytest.mark.parametrize("text", ["", "ssp", "ssp:-1", "ssp:x", "bsp:1", "async:2", "sync"])
def test_bad_sync_modes_are_refused_with_a_clear_error(text, capsys) -> None:
    with pytest.raises(AgentError, match="expected bsp, ssp:S"):
        SyncMode.parse(text)
    with pytest.raises(SystemExit) as exc:
        ps_main(["--job", "1", "--workers", "2", "--keys", "10", "--sync", text])
    assert exc.value.code == 2 and "expected bsp, ssp:S" in capsys.readouterr().err


def test_ssp_with_a_switch_needs_one_shard_and_no_leaves() -> None:
    base = dict(job_id=1, n_workers=2, key_space=10, collect=True, hot_slots=8)
    cfg = PSConfig(**base, switch=("127.0.0.1", 1), n_shards=2, sync=SyncMode(2))
    with pytest.raises(AgentError, match="needs one PS shard"):
        cfg.validate()
    PSConfig(**base, switch=("127.0.0.1", 1), n_shards=2).validate()  # BSP: any shards
    PSConfig(**{**base, "collect": False}, n_shards=2, sync=SyncMode(None)).validate()


# --- pacing, against scripted workers ----------------------------------------------------


class Scripted:
    """A PS (server-only, in a thread) and one raw socket per worker."""

    def __init__(self, sync: str, n_workers: int = 2, iterations: int = 6) -> None:
        cfg = PSConfig(
            job_id=JOB,
            n_workers=n_workers,
            key_space=16,
            iterations=iterations,
            bind=("127.0.0.1", 0),
            linger=0.2,
            deadline=20,
            sync=SyncMode.parse(sync),
        )
        self.ps = ParameterServer(cfg)
        self.socks = []
        for _ in range(n_workers):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.settimeout(0.3)
            self.socks.append(s)
        self.seq = [0] * n_workers
        self.result: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.result["summary"] = self.ps.run()

    def send(self, w: int, op: Op, seq: int, it: int, keys=(), values=None) -> None:
        self.socks[w].sendto(encode(op, JOB, w, seq, it, keys, values), self.ps.address)

    def reply(self, w: int):
        """The next datagram to worker w, or None after 0.3 s."""
        try:
            return decode(self.socks[w].recv(4096))
        except TimeoutError:
            return None

    def push(self, w: int, it: int, keys, values) -> None:
        self.seq[w] += 1
        self.send(w, Op.PUSH, self.seq[w], it, keys, values)
        ack = self.reply(w)
        assert ack is not None and ack.op == Op.PUSH_ACK and ack.seq == self.seq[w]

    def done(self, w: int, it: int) -> bool:
        """DONE(it); whether DONE_ACK(it) came back."""
        self.send(w, Op.DONE, 0, it)
        got = self.reply(w)
        assert got is None or (got.op, got.iteration) == (Op.DONE_ACK, it), got
        return got is not None

    def pull(self, w: int, it: int, keys):
        """PULL(it) of `keys`: the values, or None if the PS held it."""
        self.send(w, Op.PULL, 100 + it, it, keys, [0] * len(keys))
        got = self.reply(w)
        return None if got is None else list(got.values)

    def finish(self) -> dict:
        self.thread.join(20)
        for s in self.socks:
            s.close()
        self.ps.close()
        return self.result["summary"]


def test_ssp_lets_a_worker_run_s_iterations_ahead_and_no_further() -> None:
    job = Scripted("ssp:2")
    for it in (1, 2):  # worker 0 finishes 1 and 2 while worker 1 is still in 1
        assert job.pull(0, it, [3]) == [0]  # no iteration is applied whole yet, not even 1
        job.push(0, it, [3], [10])
        assert job.done(0, it)
    assert job.pull(0, 3, [3]) == [0]  # 3 - 1 - 2 = 0 <= applied (0): stale by 2
    job.push(0, 3, [3], [10])
    assert not job.done(0, 3)  # 3 - 2 = 1 is not applied: it waits
    assert job.pull(1, 1, [3]) == [0]
    job.push(1, 1, [3], [1])
    assert job.done(1, 1)  # 1 - 2 <= 0: at once, and iteration 1 is applied
    got = job.reply(0)  # worker 0's DONE(3) is released by the application of 1
    assert got is not None and (got.op, got.iteration) == (Op.DONE_ACK, 3)
    assert job.pull(1, 2, [3]) == [-11]  # iteration 1 applied: worker 0's 10 and worker 1's 1
    summary = job.ps.summary()
    assert summary["sync"] == "ssp:2"
    # pull(0, 2) lacked iteration 1, pull(0, 3) iterations 1 and 2; the rest were current
    assert summary["staleness"] == {"0": 3, "1": 1, "2": 1}


def test_ssp_holds_a_pull_beyond_the_bound_until_it_is_allowed() -> None:
    job = Scripted("ssp:1")
    job.push(0, 1, [5], [4])
    assert job.done(0, 1)
    assert job.pull(0, 3, [5]) is None  # 3 - 1 - 1 = 1 > applied (0): held (only a
    job.push(1, 1, [5], [2])  # reordered retransmission does this; paced workers never)
    assert job.done(1, 1)
    got = job.reply(0)  # released with iteration 1
    assert got is not None and got.op == Op.PULL_REPLY and got.values == (-6,)


def test_async_acks_at_once_and_applies_cold_updates_as_they_come() -> None:
    job = Scripted("async", iterations=4)
    for it in (1, 2, 3, 4):  # worker 0 runs through every iteration alone
        job.push(0, it, [2], [1])
        assert job.done(0, it)
    assert job.pull(0, 5, [2]) == [-4]  # its four pushes, applied on arrival
    assert job.ps.cur == 1  # but no iteration is applied whole: worker 1 sent nothing
    for it in (1, 2, 3, 4):
        job.push(1, it, [2], [3])
        assert job.done(1, it)
    summary = job.finish()
    assert summary["finished"] and summary["iterations_done"] == 4
    assert job.ps.params[2] == -16
    assert summary["staleness"] == {"4": 1}


def test_bsp_waits_for_every_worker_as_before() -> None:
    job = Scripted("bsp", iterations=2)
    job.push(0, 1, [1], [7])
    assert not job.done(0, 1)
    assert job.pull(0, 2, [1]) is None  # held until the barrier
    job.push(1, 1, [1], [1])
    assert job.done(1, 1)
    got = [job.reply(0), job.reply(0)]  # DONE_ACK(1), then the held pull's reply
    assert sorted((m.op, m.values) for m in got if m) == [
        (Op.PULL_REPLY, (-8,)),
        (Op.DONE_ACK, ()),
    ]
    assert job.ps.summary()["staleness"] == {"0": 1}


# --- whole jobs through the embedded pipeline ----------------------------------------------


class _Straggler(Relay):
    """Every datagram of worker 1 (requests and replies) waits `extra` seconds more, in
    order: a worker several times slower than the others."""

    def __init__(self, upstreams, extra: float, **kwargs) -> None:
        super().__init__(upstreams, **kwargs)
        self.extra = extra

    def _emit(self, sock, data, dest) -> None:
        if data[6:8] != b"\x00\x01" or self.rng.random() < self.drop:
            super()._emit(sock, data, dest)
            return
        self._n += 1
        heapq.heappush(self.queue, (time.monotonic() + self.extra, self._n, sock, data, dest))


def zipf() -> ZipfWorkload:
    return ZipfWorkload(key_space=2000, skew=1.2, keys_per_iter=40, seed=23)


@pytest.mark.parametrize(
    "sync,loss", [("ssp:1", 0.0), ("ssp:3", 0.0), ("async", 0.0), ("ssp:2", 0.03), ("async", 0.03)]
)
def test_ssp_and_async_with_a_straggler_conserve_every_update(sync, loss, tmp_path) -> None:
    wl, iterations = zipf(), 8
    sw = make_switch((2, 40, HOT_SLOTS), _switch(wl, 40))
    relay = lambda ups: _Straggler(  # noqa: E731
        ups, 0.02, switch=sw, drop=loss, dup=2 * loss, delay=0.002 if loss else 0.0, seed=5
    )
    params, summaries, _, r = run_job(
        wl, 3, iterations, tmp_path, relay=relay, collect=True, sync=sync
    )
    check_exact(wl, 3, iterations, params, summaries)  # conservation, bit for bit
    s = summaries[0]
    bound = SyncMode.parse(sync).bound
    stale = {int(k): v for k, v in s["staleness"].items()}
    assert s["sync"] == sync and max(stale) > 0  # the fast workers ran ahead
    assert bound is None or max(stale) <= bound
    assert sw.stats[Stat.HOT_APPLIED] > 0 and s["counters"]["collected_entries"] > 0
    if bound is not None and bound <= 1:
        assert sw.stats[Stat.SLOT_BUSY] == 0  # ssp:1 never meets an unread copy
    if loss:
        assert r.counters["dropped"] > 0
    rows = (tmp_path / "ps0.csv").read_text().splitlines()
    assert rows[0].endswith(",stale")
    pulls = [row.split(",") for row in rows[1:] if ",PULL," in row and ",replied," in row]
    assert sum(1 for p in pulls if p[-1] != "0") == sum(v for k, v in stale.items() if k)


def test_async_far_ahead_is_refused_by_the_switch_not_lost(tmp_path) -> None:
    """In async the fast workers reach iterations whose copies still hold the straggler's
    unread ones: the switch refuses them (SLOT_BUSY), the PS sums them, nothing is lost."""
    wl, iterations = zipf(), 10
    sw = make_switch((0, 0, HOT_SLOTS), _switch(wl, 40))
    relay = lambda ups: _Straggler(ups, 0.05, switch=sw)  # noqa: E731
    params, summaries, _, _ = run_job(
        wl, 3, iterations, tmp_path, relay=relay, collect=True, sync="async"
    )
    check_exact(wl, 3, iterations, params, summaries)
    assert sw.stats[Stat.SLOT_BUSY] > 0 and sw.stats[Stat.HOT_APPLIED] > 0


def test_bsp_parameters_and_summary_are_unchanged(tmp_path) -> None:
    wl = zipf()
    sw = make_switch((1, 8, HOT_SLOTS), _switch(wl, 40))
    relay = lambda ups: Relay(ups, switch=sw)  # noqa: E731
    params, summaries, _, _ = run_job(wl, 3, 5, tmp_path, relay=relay, collect=True)
    check_exact(wl, 3, 5, params, summaries)
    assert summaries[0]["sync"] == "bsp" and set(summaries[0]["staleness"]) == {"0"}
    assert sw.stats[Stat.SLOT_BUSY] == 0
    assert json.dumps(summaries[0])  # the summary stays JSON
    assert np.count_nonzero(params) > 0
