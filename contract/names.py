"""P4Runtime names and ids of the hotagg program; no Scapy, no protobuf.

- Objects declared once (tables, actions, counter, registers of HotaggIngress) are pinned in
  p4src/include/ids.p4; their names and ids are read from there at import. The Python name is
  the macro's without `HOTAGG_ID_`: `HOTAGG_ID_TABLE_JOBS` -> `TABLE_JOBS`.
- The HotKeyLookup control is instantiated MAX_ENTRIES times (`lookup0` .. `lookup7`, one per
  entry position, since p4c applies a table at most once per pass); its objects carry no @id
  (p4c's hash ids, see scripts/gen_p4info.py) and their names are made by the functions below,
  the only place that spells the `lookup{i}` scheme.
- The two controller headers are known by their @controller_header names.
"""

from __future__ import annotations

from contract.constants import MAX_ENTRIES
from contract.p4files import IDS_P4, ContractError, read_pinned_ids

INGRESS = "HotaggIngress"

PINNED = read_pinned_ids()  # `<KIND>_<NAME>` -> (id, P4Info name), as in ids.p4
PINNED_IDS: dict[str, int] = {p.name: p.id for p in PINNED.values()}  # P4Info name -> id


def _pinned(macro: str) -> str:
    try:
        return PINNED[macro].name
    except KeyError:
        raise ContractError(f"{IDS_P4} has no HOTAGG_ID_{macro}") from None


# Tables
TABLE_IPV4_LPM = _pinned("TABLE_IPV4_LPM")
TABLE_JOBS = _pinned("TABLE_JOBS")
TABLE_DROP_SIM = _pinned("TABLE_DROP_SIM")
TABLE_WORKER_ADMISSION = _pinned("TABLE_WORKER_ADMISSION")
TABLE_PS_ADMISSION = _pinned("TABLE_PS_ADMISSION")
# Actions
ACTION_IPV4_FORWARD = _pinned("ACTION_IPV4_FORWARD")
ACTION_SEND_TO_CPU = _pinned("ACTION_SEND_TO_CPU")
ACTION_DROP = _pinned("ACTION_DROP")
ACTION_SET_JOB = _pinned("ACTION_SET_JOB")
ACTION_UNKNOWN_JOB = _pinned("ACTION_UNKNOWN_JOB")
ACTION_SET_DROP_RATE = _pinned("ACTION_SET_DROP_RATE")
ACTION_ADMIT = _pinned("ACTION_ADMIT")
ACTION_REFUSE = _pinned("ACTION_REFUSE")
# Counter (one cell per contract.constants.Stat)
COUNTER_STATS = _pinned("COUNTER_STATS")
# Registers
REGISTER_DEDUP_SEQ = _pinned("REGISTER_DEDUP_SEQ")
REGISTER_DEDUP_MASK = _pinned("REGISTER_DEDUP_MASK")
REGISTER_AGG_VALUE = _pinned("REGISTER_AGG_VALUE")
REGISTER_AGG_ITER = _pinned("REGISTER_AGG_ITER")
REGISTER_AGG_KEY = _pinned("REGISTER_AGG_KEY")
REGISTER_CACHE_VALUE = _pinned("REGISTER_CACHE_VALUE")
REGISTER_CACHE_ITER = _pinned("REGISTER_CACHE_ITER")
REGISTER_CACHE_KEY = _pinned("REGISTER_CACHE_KEY")
# Cold-key sketch (p4src/include/sketch.p4): config table, counters the controller reads,
# registers the data plane reads, one per row.
TABLE_SKETCH_CONFIG = _pinned("TABLE_SKETCH_CONFIG")
ACTION_SET_SKETCH = _pinned("ACTION_SET_SKETCH")
COUNTER_SKETCH_ROW0 = _pinned("COUNTER_SKETCH_ROW0")
COUNTER_SKETCH_ROW1 = _pinned("COUNTER_SKETCH_ROW1")
REGISTER_SKETCH_CELLS0 = _pinned("REGISTER_SKETCH_CELLS0")
REGISTER_SKETCH_CELLS1 = _pinned("REGISTER_SKETCH_CELLS1")
SKETCH_ROW_COUNTERS = (COUNTER_SKETCH_ROW0, COUNTER_SKETCH_ROW1)
SKETCH_CELL_REGISTERS = (REGISTER_SKETCH_CELLS0, REGISTER_SKETCH_CELLS1)
# Aggregation at every leaf (p4src/include/leaves.p4): two keyless tables the controller
# sets per switch, and the root's count of absorbed partial PUSHes.
TABLE_SERVICE_ADDRESS = _pinned("TABLE_SERVICE_ADDRESS")
ACTION_SET_SERVICE_ADDRESS = _pinned("ACTION_SET_SERVICE_ADDRESS")
TABLE_CHAIN_NEXT = _pinned("TABLE_CHAIN_NEXT")
ACTION_SET_CHAIN_NEXT = _pinned("ACTION_SET_CHAIN_NEXT")
REGISTER_FLUSH_COUNT = _pinned("REGISTER_FLUSH_COUNT")
REGISTER_FLUSH_ITER = _pinned("REGISTER_FLUSH_ITER")
# Consistency modes (docs/design.md section 8): per job, the newest iteration the PS has read.
REGISTER_COLLECTED_ITER = _pinned("REGISTER_COLLECTED_ITER")
# Aggregation at every leaf (section 7): per job, the iteration this switch was last flushed for.
REGISTER_FLUSHED_ITER = _pinned("REGISTER_FLUSHED_ITER")
# The digest is named after its struct type; p4c ignores @id there, so its id is p4c's hash
# of the name (scripts/gen_p4info.py), like the HotKeyLookup objects'.
DIGEST_SKETCH = "sketch_digest_t"
DIGEST_SKETCH_FIELDS = (("job_id", 16), ("key", 64), ("epoch", 32), ("estimate", 32))

# Controller headers (@controller_header in p4src/include/headers.p4)
PACKET_IN = "packet_in"
PACKET_OUT = "packet_out"


# --- HotKeyLookup instances ---


def lookup(i: int) -> str:
    """The full name of hot-key lookup instance `i` (0 <= i < MAX_ENTRIES)."""
    if not 0 <= i < MAX_ENTRIES:
        raise ValueError(f"lookup instance {i} out of range 0..{MAX_ENTRIES - 1}")
    return f"{INGRESS}.lookup{i}"


def hot_keys_table(i: int) -> str:
    """Table (job_id, key) -> set_slot(offset) | miss of instance `i`."""
    return f"{lookup(i)}.hot_keys"


def set_slot_action(i: int) -> str:
    return f"{lookup(i)}.set_slot"


def miss_action(i: int) -> str:
    return f"{lookup(i)}.miss"


def hits_counter(i: int) -> str:
    """The direct counter of instance `i`'s hot_keys table."""
    return f"{lookup(i)}.hits"


LOOKUPS = tuple(lookup(i) for i in range(MAX_ENTRIES))
HOT_KEYS_TABLES = tuple(hot_keys_table(i) for i in range(MAX_ENTRIES))
SET_SLOT_ACTIONS = tuple(set_slot_action(i) for i in range(MAX_ENTRIES))
MISS_ACTIONS = tuple(miss_action(i) for i in range(MAX_ENTRIES))
HITS_COUNTERS = tuple(hits_counter(i) for i in range(MAX_ENTRIES))
