"""The embedded target's data plane: the P4 program of p4src/ in Python, one module per control.

`Pipeline` holds the P4Runtime-visible state (schema.py builds it) and runs frames through
ingress.process. The hot path reads tables, registers and counters through the plain dicts
and lists documented in softswitch/state.py; the objects themselves are never replaced, so
those references stay valid across reset().
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from contract import names
from softswitch import schema
from softswitch.pipeline import ingress
from softswitch.state import Counter, Register, Table

if TYPE_CHECKING:
    from softswitch.pipeline.forwarding import HeadKey, HeadTemplate, Route


class Pipeline:
    """One switch's tables, counters and registers, and the packet processing over them."""

    def __init__(self, seed: int | None = None) -> None:
        self.tables: dict[str, Table] = schema.build_tables()
        self.counters: dict[str, Counter] = schema.build_counters()
        self.registers: dict[str, Register] = schema.build_registers()
        self.rng = random.Random(seed)
        # Fast-path references (the same objects as above, cleared in place by reset()).
        self.t_lpm = self.tables[names.TABLE_IPV4_LPM]
        self.t_jobs = self.tables[names.TABLE_JOBS]
        self.t_drop = self.tables[names.TABLE_DROP_SIM]
        self.t_hot = tuple(self.tables[t] for t in names.HOT_KEYS_TABLES)
        self.t_worker_admission = self.tables[names.TABLE_WORKER_ADMISSION]
        self.t_ps_admission = self.tables[names.TABLE_PS_ADMISSION]
        stats = self.counters[names.COUNTER_STATS]
        self.stats_packets = stats.packets
        self.stats_bytes = stats.bytes
        r = self.registers
        self.dedup_seq = r[names.REGISTER_DEDUP_SEQ].values
        self.dedup_mask = r[names.REGISTER_DEDUP_MASK].values
        self.agg_value = r[names.REGISTER_AGG_VALUE].values
        self.agg_iter = r[names.REGISTER_AGG_ITER].values
        self.agg_key = r[names.REGISTER_AGG_KEY].values
        self.cache_value = r[names.REGISTER_CACHE_VALUE].values
        self.cache_iter = r[names.REGISTER_CACHE_ITER].values
        self.cache_key = r[names.REGISTER_CACHE_KEY].values
        # cold-key sketch (sketch.py): config table, (packets, bytes) per row, cells per row
        self.t_sketch = self.tables[names.TABLE_SKETCH_CONFIG]
        rows = [self.counters[c] for c in names.SKETCH_ROW_COUNTERS]
        self.sketch_rows = tuple((c.packets, c.bytes) for c in rows)
        self.sketch_cells = tuple(r[c].values for c in names.SKETCH_CELL_REGISTERS)
        # aggregation at every leaf (leaves.py): keyless tables, the root's flush counts
        self.t_service = self.tables[names.TABLE_SERVICE_ADDRESS]
        self.t_chain = self.tables[names.TABLE_CHAIN_NEXT]
        self.flush_count = r[names.REGISTER_FLUSH_COUNT].values
        self.flush_iter = r[names.REGISTER_FLUSH_ITER].values
        # consistency modes (docs/design.md section 8): per job, the newest iteration read
        self.collected_iter = r[names.REGISTER_COLLECTED_ITER].values
        # ... and the iteration a FLUSH last read this switch's sums of (section 7)
        self.flushed_iter = r[names.REGISTER_FLUSHED_ITER].values
        # Receives each digest (job_id, key, epoch, estimate) the pipeline emits; the
        # P4Runtime server sets it (p4rt/digests.py). None: digests are kept in `digests`.
        self.digest_sink: Callable[[tuple[int, ...]], None] | None = None
        self.digests: list[tuple[int, ...]] = []
        # ipv4_lpm decisions by destination, valid while route_gen == t_lpm._gen (forwarding)
        self.route_cache: dict[int, Route] = {}
        self.route_gen = -1
        # first bytes of PUSH outputs by input head (forwarding.head_template), same validity
        self.head_cache: dict[int, dict[HeadKey, HeadTemplate]] = {}
        self.head_gen = -1

    # process(ingress_port, frame) -> [(egress_port, bytes)]; a plain function as the method
    # saves a call layer per packet.
    process = ingress.process

    def reset(self) -> None:
        """Forget all state, as a new SetForwardingPipelineConfig does."""
        for t in self.tables.values():
            t.clear()
        for c in self.counters.values():
            c.clear()
        for r in self.registers.values():
            r.clear()
