"""A PS shard's configuration (`python -m hosts.ps`'s options, hosts/ps.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.constants import HOTAGG_PORT, MAX_WORKERS, NUM_SLOTS
from contract.freqfile import is_live
from hosts.agent import Address, AgentError
from hosts.leaf_flush import Leaf


@dataclass(frozen=True)
class SyncMode:
    """How far workers may drift apart (docs/design.md section 8): `bound` = S of `ssp:S`
    (0 is BSP), None for `async` (no bound)."""

    bound: int | None = 0

    @classmethod
    def parse(cls, text: str) -> SyncMode:
        """`bsp`, `ssp:S` (S >= 0; `ssp:0` is `bsp`) or `async`."""
        name, _, arg = text.strip().lower().partition(":")
        if name == "bsp" and not arg:
            return cls(0)
        if name == "async" and not arg:
            return cls(None)
        if name == "ssp" and arg.isdigit():
            return cls(int(arg))
        raise AgentError(f"sync mode {text!r}: expected bsp, ssp:S (S >= 0) or async")

    @property
    def bsp(self) -> bool:
        return self.bound == 0

    def allows(self, iteration: int, applied: int) -> bool:
        """Whether a worker that finished `iteration` may go on while iterations up to
        `applied` are applied: iteration - S <= applied."""
        return self.bound is None or iteration - self.bound <= applied

    def __str__(self) -> str:
        return "async" if self.bound is None else "bsp" if self.bound == 0 else f"ssp:{self.bound}"


@dataclass
class PSConfig:
    job_id: int
    n_workers: int
    key_space: int
    iterations: int | None = None  # None: serve until stopped
    bind: Address = ("127.0.0.1", HOTAGG_PORT)
    shard: int = 0
    n_shards: int = 1
    collect: bool = False
    switch: Address | None = None  # switch service address for COLLECT/WRITEBACK
    hot_slots: int = 0  # the job's slot_count
    writeback: bool = True
    rto: float = 0.002  # minimum COLLECT timeout (it adapts to the measured RTT)
    rto_max: float = 0.4
    collect_retries: int | None = None  # None: ask until answered (the deadline bounds it)
    collect_window: int = 64
    linger: float = 1.0  # after the last iteration, keep re-acking DONEs until idle this long
    max_held: int = 65536
    deadline: float | None = None
    log_path: str | None = None
    freq_path: str | None = None
    freq_every: int = 0  # also rewrite freq_path every this many iterations (0: only at exit)
    params_path: str | None = None
    summary_path: str | None = None
    # key -> slot offset (or None) of the keys the controller made hot: written back before
    # iteration 1, so that the cache serves pulls from the start
    hot_keys: dict[int, int | None] | None = None
    # aggregation at every leaf (docs/design.md section 7): the remote leaves, in chain order
    leaves: tuple[Leaf, ...] = ()
    # consistency mode (docs/design.md section 8): bsp, ssp:S or async
    sync: SyncMode = field(default_factory=SyncMode)

    def validate(self) -> None:
        if not 0 <= self.job_id < 1 << 16:
            raise AgentError(f"job id {self.job_id} must be 0..65535")
        if not 1 <= self.n_workers <= MAX_WORKERS:
            raise AgentError(f"workers must be 1..{MAX_WORKERS}")
        if self.key_space < 1 or not 0 <= self.shard < self.n_shards:
            raise AgentError("key space >= 1 and 0 <= shard < shards are required")
        if self.collect and (self.switch is None or not 1 <= self.hot_slots <= NUM_SLOTS):
            raise AgentError(f"collect needs --switch and --hot-slots 1..{NUM_SLOTS}")
        retries_bad = self.collect_retries is not None and self.collect_retries < 0
        if self.freq_every < 0 or (self.freq_every and not self.freq_path):
            raise AgentError("--freq-every needs --freq and must be >= 0")
        if self.freq_every and is_live(self.freq_path or ""):
            raise AgentError("--freq-every rewrites a file; a .live --freq is always current")
        if self.rto <= 0 or self.rto_max < self.rto or retries_bad:
            raise AgentError("0 < rto <= rto_max and collect_retries >= 0 are required")
        self._validate_leaves()
        if self.sync.bound is not None and self.sync.bound < 0:
            raise AgentError("ssp:S needs S >= 0")
        if not self.sync.bsp and self.collect and self.n_shards != 1:
            raise AgentError(
                f"--sync {self.sync} with --collect needs one PS shard: every shard reads all "
                "of the job's slots, and one that has read an iteration would let the switch "
                "reuse copies another has not read (docs/design.md section 8)"
            )
        if not self.sync.bsp and self.leaves:
            raise AgentError(f"--leaf is BSP only, not --sync {self.sync} (design.md section 8)")

    def _validate_leaves(self) -> None:
        if not self.leaves:
            return
        if not self.collect:
            raise AgentError("--leaf needs --collect: the leaves' sums are flushed to the root")
        if self.n_shards != 1:
            raise AgentError("--leaf needs one PS shard: the flushes of one job have one sender")
        pseudo = [leaf.pseudo_worker for leaf in self.leaves]
        if len(set(pseudo)) != len(pseudo) or not all(
            self.n_workers <= p < MAX_WORKERS for p in pseudo
        ):
            raise AgentError(
                f"--leaf pseudo-worker ids must be distinct and in {self.n_workers}.."
                f"{MAX_WORKERS - 1} (past the job's {self.n_workers} workers)"
            )
        racks = [w for leaf in self.leaves for w in leaf.rack]
        if len(set(racks)) != len(racks) or not all(0 <= w < self.n_workers for w in racks):
            raise AgentError(
                f"--leaf racks must name distinct workers in 0..{self.n_workers - 1}: a worker "
                "sits behind one leaf"
            )
