/*
 * hotagg: P4Runtime ids of every object declared once: the frozen control-plane contract.
 *
 * Top byte = P4Runtime object type (p4info.proto P4Ids): 0x01 action, 0x02 table,
 * 0x12 counter, 0x13 direct counter, 0x16 register. Ids are never reused: retire one by
 * turning its line into a comment and take new ones from the "next free" line.
 *
 * Objects of HotKeyLookup (instantiated 8 times as lookup0..lookup7: hot_keys, set_slot,
 * miss, hits) carry no @id: p4c rejects an @id that lands on several declarations
 * ("@id N is assigned to multiple declarations"). They get p4c's own ids, a hash of their
 * full name (scripts/gen_p4info.py reproduces them), as do the two controller headers.
 *
 * Format, read by scripts/gen_p4info.py and tests/test_p4src.py:
 *   #define HOTAGG_ID_<KIND>_<NAME> 0x........  // <P4Info name>
 */
#ifndef HOTAGG_IDS_P4
#define HOTAGG_IDS_P4

// Actions (0x01)
#define HOTAGG_ID_ACTION_IPV4_FORWARD 0x01000001  // HotaggIngress.ipv4_forward
#define HOTAGG_ID_ACTION_SEND_TO_CPU 0x01000002  // HotaggIngress.send_to_cpu
#define HOTAGG_ID_ACTION_DROP 0x01000003  // HotaggIngress.drop
#define HOTAGG_ID_ACTION_SET_JOB 0x01000004  // HotaggIngress.set_job
#define HOTAGG_ID_ACTION_UNKNOWN_JOB 0x01000005  // HotaggIngress.unknown_job
#define HOTAGG_ID_ACTION_SET_DROP_RATE 0x01000006  // HotaggIngress.set_drop_rate
#define HOTAGG_ID_ACTION_ADMIT 0x01000007  // HotaggIngress.admit
#define HOTAGG_ID_ACTION_REFUSE 0x01000008  // HotaggIngress.refuse
#define HOTAGG_ID_ACTION_SET_SKETCH 0x01000009  // HotaggIngress.set_sketch
#define HOTAGG_ID_ACTION_SET_SERVICE_ADDRESS 0x0100000a  // HotaggIngress.set_service_address
#define HOTAGG_ID_ACTION_SET_CHAIN_NEXT 0x0100000b  // HotaggIngress.set_chain_next

// Tables (0x02)
#define HOTAGG_ID_TABLE_IPV4_LPM 0x02000001  // HotaggIngress.ipv4_lpm
#define HOTAGG_ID_TABLE_JOBS 0x02000002  // HotaggIngress.jobs
#define HOTAGG_ID_TABLE_DROP_SIM 0x02000003  // HotaggIngress.drop_sim
#define HOTAGG_ID_TABLE_WORKER_ADMISSION 0x02000004  // HotaggIngress.worker_admission
#define HOTAGG_ID_TABLE_PS_ADMISSION 0x02000005  // HotaggIngress.ps_admission
#define HOTAGG_ID_TABLE_SKETCH_CONFIG 0x02000006  // HotaggIngress.sketch_config
#define HOTAGG_ID_TABLE_SERVICE_ADDRESS 0x02000007  // HotaggIngress.service_address
#define HOTAGG_ID_TABLE_CHAIN_NEXT 0x02000008  // HotaggIngress.chain_next

// Counters (0x12)
#define HOTAGG_ID_COUNTER_STATS 0x12000001  // HotaggIngress.stats
#define HOTAGG_ID_COUNTER_SKETCH_ROW0 0x12000002  // HotaggIngress.sketch_row0
#define HOTAGG_ID_COUNTER_SKETCH_ROW1 0x12000003  // HotaggIngress.sketch_row1

// Direct counters (0x13): none pinned (the only ones live in HotKeyLookup).

// Registers (0x16)
#define HOTAGG_ID_REGISTER_DEDUP_SEQ 0x16000001  // HotaggIngress.dedup_seq
#define HOTAGG_ID_REGISTER_DEDUP_MASK 0x16000002  // HotaggIngress.dedup_mask
#define HOTAGG_ID_REGISTER_AGG_VALUE 0x16000003  // HotaggIngress.agg_value
#define HOTAGG_ID_REGISTER_AGG_ITER 0x16000004  // HotaggIngress.agg_iter
#define HOTAGG_ID_REGISTER_AGG_KEY 0x16000005  // HotaggIngress.agg_key
#define HOTAGG_ID_REGISTER_CACHE_VALUE 0x16000006  // HotaggIngress.cache_value
#define HOTAGG_ID_REGISTER_CACHE_ITER 0x16000007  // HotaggIngress.cache_iter
#define HOTAGG_ID_REGISTER_CACHE_KEY 0x16000008  // HotaggIngress.cache_key
#define HOTAGG_ID_REGISTER_SKETCH_CELLS0 0x16000009  // HotaggIngress.sketch_cells0
#define HOTAGG_ID_REGISTER_SKETCH_CELLS1 0x1600000a  // HotaggIngress.sketch_cells1
#define HOTAGG_ID_REGISTER_FLUSH_COUNT 0x1600000b  // HotaggIngress.flush_count
#define HOTAGG_ID_REGISTER_FLUSH_ITER 0x1600000c  // HotaggIngress.flush_iter
#define HOTAGG_ID_REGISTER_COLLECTED_ITER 0x1600000d  // HotaggIngress.collected_iter
#define HOTAGG_ID_REGISTER_FLUSHED_ITER 0x1600000e  // HotaggIngress.flushed_iter

// Digests (0x17): none pinned. sketch_digest_t (sketch.p4) is named after its struct type,
// and p4c ignores an @id there: it gets p4c's hashed id, 0x17159c53.

// Next free: action 0x0100000c, table 0x02000009, counter 0x12000004,
// direct counter 0x13000001, register 0x1600000f.

#endif  /* HOTAGG_IDS_P4 */
