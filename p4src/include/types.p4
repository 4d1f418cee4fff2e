/*
 * hotagg: types, wire constants (ops, flags, stats reasons) and parser errors.
 * docs/design.md §1-2 is the contract. contract/constants.py reads the ops, flags and stats
 * reasons from these lines (keep the `const <type> NAME = value;` form).
 */
#ifndef HOTAGG_TYPES_P4
#define HOTAGG_TYPES_P4

/* ---- widths ---- */
typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<16> l4_port_t;
// v1model as p4c compiles it by default (V1MODEL_VERSION 20180101): ports are bit<9>.
typedef bit<9>  port_t;

typedef bit<8>  op_t;
typedef bit<8>  flags_t;
typedef bit<16> job_id_t;       // job id on the wire, chosen by the experiment
// Dense job number chosen by the controller; 8 bits so any byte the controller writes is
// accepted, masked to log2(MAX_JOBS) bits where it indexes switch state.
typedef bit<8>  job_index_t;
typedef bit<16> worker_id_t;
typedef bit<32> seq_t;
typedef bit<32> iteration_t;
typedef bit<64> hot_key_t;
// Fixed point, two's complement (value / 2^16). bit<32> rather than int<32> because v1model
// registers hold bit<W> only; signed overflow is detected on the sign bits.
typedef bit<32> value_t;
typedef bit<8>  entry_mask_t;   // bit i = entry position i; K = 8 positions fit one byte
// Slot numbers and offsets, and every register/counter index: v1model (20180101) indexes
// registers and counters with bit<32>, so indices never need a cast at the call.
typedef bit<32> slot_t;
typedef bit<32> reg_index_t;
typedef bit<32> stat_t;         // cell of HotaggIngress.stats
typedef bit<64> sketch_cell_t;  // sketch.p4: epoch (63..32) | reported (31) | count (30..0)
typedef bit<32> flush_count_t;  // leaves.p4: partial PUSHes absorbed in an iteration

/* ---- wire constants ---- */
const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP = 17;
// Only IPv4 headers without options are parsed further; others are just routed.
const bit<4>  IPV4_IHL_NO_OPTIONS = 5;

const bit<8>  HOTAGG_VERSION = 1;

// Ops (docs/design.md §1). 1, 3, 7, 9, 11 are processed by the switch; the rest pass through.
const op_t OP_PUSH = 1;
const op_t OP_PUSH_ACK = 2;
const op_t OP_PULL = 3;
const op_t OP_PULL_REPLY = 4;
@noWarn("unused") const op_t OP_DONE = 5;          // passes through the switch
const op_t OP_DONE_ACK = 6;
const op_t OP_COLLECT = 7;
const op_t OP_COLLECT_REPLY = 8;
const op_t OP_WRITEBACK = 9;
const op_t OP_WRITEBACK_ACK = 10;
const op_t OP_FLUSH = 11;       // PS -> remote leaf: becomes a partial PUSH (§7, leaves.p4)
const op_t OP_MAX = 11;         // ops above this (and 0) are UNKNOWN_OP

const flags_t FLAG_FROM_SWITCH = 0x01;  // set on replies the switch generates
@noWarn("unused") const flags_t FLAG_RETRANSMIT = 0x02;  // informative only; the switch never reads it
const flags_t FLAG_INVALIDATE = 0x04;   // COLLECT only: the mask untags cache entries
const flags_t FLAG_CHAIN = 0x08;        // WRITEBACK only: go on to chain_next, ack at the end
// DONE only, never answered: the worker's hot pushes of the iteration are all acked (§7: the
// PS may flush its leaf then). Switches pass it as any DONE.
@noWarn("unused") const flags_t FLAG_HOT_PUSHED = 0x10;

// Cells of HotaggIngress.stats (docs/design.md §2, "Stats reasons").
const stat_t STAT_MALFORMED = 0;
const stat_t STAT_UNKNOWN_OP = 1;
const stat_t STAT_UNKNOWN_JOB = 2;
const stat_t STAT_BAD_WORKER = 3;
const stat_t STAT_SIM_DROP = 4;
const stat_t STAT_PUSH = 5;
const stat_t STAT_PUSH_DUP = 6;
const stat_t STAT_PUSH_STALE = 7;
const stat_t STAT_HOT_APPLIED = 8;
const stat_t STAT_COLD_FORWARDED = 9;
const stat_t STAT_OVERFLOW = 10;
const stat_t STAT_SLOT_CONFLICT = 11;
const stat_t STAT_PUSH_SWITCH_ACK = 12;
const stat_t STAT_PULL = 13;
const stat_t STAT_PULL_HIT = 14;
const stat_t STAT_PULL_MISS = 15;
const stat_t STAT_COLLECT = 16;
const stat_t STAT_WRITEBACK = 17;
const stat_t STAT_CACHE_WRITE = 18;
const stat_t STAT_NO_ROUTE = 19;
const stat_t STAT_BAD_SLOT = 20;
const stat_t STAT_PASS = 21;
// Tenancy (tenancy.p4): a request of a known job from a (ingress port, IPv4 source) the
// controller did not admit; dropped before any register is read or written.
const stat_t STAT_FOREIGN_WORKER = 22;  // a worker op not from that (job, worker id)'s admission
const stat_t STAT_FOREIGN_PS = 23;      // COLLECT, WRITEBACK or FLUSH not from the job's PS
// Any IPv4 packet, hotagg or not, that ipv4_forward would send on with TTL 0 (it came with
// TTL 0 or 1), and a checked hotagg request that came with TTL 0 or 1 (before it is processed).
const stat_t STAT_TTL_EXPIRED = 24;
// A PUSH_ACK, PULL_REPLY or DONE_ACK (a reply: UDP source port 18497) from a (ingress port,
// IPv4 source) not admitted as its job's PS (ps_admission); dropped.
const stat_t STAT_FOREIGN_REPLY = 25;
// Aggregation at every leaf (leaves.p4, docs/design.md §7).
// TRANSIT: routed on unchanged, a PS op addressed to another switch or a partial PUSH where
// no service address is set.
const stat_t STAT_TRANSIT = 26;
const stat_t STAT_FLUSH = 27;           // FLUSH turned into a partial PUSH
const stat_t STAT_FLUSH_ABSORBED = 28;  // fresh partial PUSH applied whole here: flush_count + 1
const stat_t STAT_CHAIN_FORWARD = 29;   // chained WRITEBACK cached, then sent on to chain_next
// Consistency modes (slot_store.p4, docs/design.md §8): a hot entry whose slot copy holds an
// older iteration the PS has not read yet goes to the PS instead of overwriting it.
const stat_t STAT_SLOT_BUSY = 30;
// Aggregation at every leaf (§7): a fresh PUSH of the iteration this switch was flushed for
// is not aggregated here; its entries go on toward the PS (the flushed sums left already).
const stat_t STAT_SLOT_FLUSHED = 31;

/* ---- parser errors ---- */
// count > MAX_ENTRIES: the parser rejects before walking past the header stack. v1model
// does not drop on a parser error; ingress sees standard_metadata.parser_error and counts
// MALFORMED (p4lang/behavioral-model#446, p4lang/p4c#808).
error {
    HotaggTooManyEntries
}

#endif  /* HOTAGG_TYPES_P4 */
