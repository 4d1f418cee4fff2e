/*
 * hotagg: sizes and the index layouts derived from them, in one place.
 * These lines are the only place the numbers are written: contract/constants.py reads them
 * (keep the `const <type> NAME = value;` form), and tests/test_p4src.py checks every derived
 * mask and shift. Plain bit<W> literals on purpose: p4c folds them before type checking, so
 * they are usable as table, register and header stack sizes.
 */
#ifndef HOTAGG_SIZES_P4
#define HOTAGG_SIZES_P4

// K: entries per packet. p4c applies a table at most once per pass, so the program needs
// one hot-key table instance per position; 8 keeps the per-entry mask in one byte and a
// packet at 158 bytes.
const bit<8> MAX_ENTRIES = 8;

// Wire lengths in bytes: a valid request or reply has udp.length == 8 + 20 + 12 * count.
// ETH_IPV4_LEN: where UDP starts (Ethernet, IPv4 without options), to check that a frame
// holds its UDP datagram whole.
const bit<32> ETH_IPV4_LEN = 34;
const bit<16> UDP_HEADER_LEN = 8;
const bit<16> HEADER_LEN = 20;
const bit<16> ENTRY_LEN = 12;

// Aggregation slots per switch, shared by all jobs (each job owns [slot_base,
// slot_base + slot_count)). A power of two, so slot numbers are masked into range.
const bit<32> NUM_SLOTS = 16384;
// Entries per hot-key table instance: every slot can hold a distinct hot key.
const bit<32> HOT_KEYS_SIZE = 16384;
// Jobs and workers per job: job_index (4 bits) and worker_id (8 bits) index dedup state.
const bit<32> MAX_JOBS = 16;
const bit<16> MAX_WORKERS = 256;
// Push packets a worker may have in flight; seq mod DEDUP_WINDOW picks its dedup cell.
@noWarn("unused") const bit<32> DEDUP_WINDOW = 64;  // documents DEDUP_SEQ_MASK below
// = MAX_JOBS * MAX_WORKERS * DEDUP_WINDOW.
const bit<32> DEDUP_SIZE = 262144;

const bit<32> IPV4_LPM_SIZE = 1024;
// Tenancy (tenancy.p4): one (ingress port, source address) per worker of every job
// (= MAX_JOBS * MAX_WORKERS), and up to 4 PS hosts (shards) per job.
const bit<32> WORKER_ADMISSION_SIZE = 4096;
const bit<32> PS_ADMISSION_SIZE = 64;
const bit<32> STATS_SIZE = 32;       // stats reasons 0..31
// drop_sim rate unit: rate = probability * DROP_SCALE; r is drawn from [0, DROP_SCALE - 1].
const bit<32> DROP_SCALE = 65536;

// flush_count and flush_iter (leaves.p4): one cell per (job_index, iteration parity).
const bit<32> FLUSH_COUNT_SIZE = 32;    // 2 * MAX_JOBS
// service_address of a switch that only routes (a spine): the limited broadcast address, never
// a PS op's destination, so PS ops pass as TRANSIT, and partial PUSHes pass as where none is set.
const bit<32> SERVICE_TRANSIT = 0xFFFFFFFF;
// FLUSH batch: aux names slot offsets (aux << FLUSH_BATCH_BITS) .. + MAX_ENTRIES - 1.
const bit<8>  FLUSH_BATCH_BITS = 3;     // log2(MAX_ENTRIES)

// Requests go to this UDP destination port (0x4841, "HA"); the PS listens there.
const bit<16> HOTAGG_PORT = 18497;
// BMv2 --cpu-port: fits 9 bits and is neither 0 nor 511 (the drop port).
const bit<9> CPU_PORT = 255;

// Cold-key sketch (sketch.p4): SKETCH_ROWS = 2 rows of SKETCH_WIDTH cells, indexed by the
// bits of crc32(job_id, key) mod SKETCH_HASH_MAX: row r uses bits [12r + 11 : 12r].
const bit<32> SKETCH_WIDTH = 4096;
const bit<32> SKETCH_INDEX_MASK = 0xfff;    // SKETCH_WIDTH - 1
const bit<8>  SKETCH_INDEX_BITS = 12;       // log2(SKETCH_WIDTH)
const bit<32> SKETCH_HASH_MAX = 16777216;   // 2^(SKETCH_ROWS * SKETCH_INDEX_BITS)
// Digest receiver id (v1model digest(); BMv2 ignores it, the P4Info digest names the type).
const bit<32> SKETCH_DIGEST_RECEIVER = 1;

/* ---- index layouts (bounds-safe by construction: every index is masked) ---- */
// Two copies of each slot by iteration parity: agg index = (iteration & 1) << SLOT_BITS | slot.
const bit<8>  SLOT_BITS = 14;        // log2(NUM_SLOTS)
const bit<32> SLOT_MASK = 0x3fff;    // NUM_SLOTS - 1
const bit<32> AGG_SIZE = 32768;      // 2 * NUM_SLOTS
// Dedup cell = (job_index & 15) << 14 | (worker_id & 255) << 6 | (seq & 63) < DEDUP_SIZE.
const bit<32> DEDUP_JOB_MASK = 15;   // MAX_JOBS - 1
const bit<8>  DEDUP_JOB_SHIFT = 14;  // log2(MAX_WORKERS * DEDUP_WINDOW)
const bit<32> DEDUP_WORKER_MASK = 255;  // MAX_WORKERS - 1
const bit<8>  DEDUP_WORKER_SHIFT = 6;   // log2(DEDUP_WINDOW)
const bit<32> DEDUP_SEQ_MASK = 63;   // DEDUP_WINDOW - 1

/* ---- slot arithmetic ---- */
// A slot offset is usable by a job iff offset < slot_count and slot_base + offset <
// NUM_SLOTS, the sum taken without wrap-around (each term is checked below NUM_SLOTS first).
bool slot_in_job(in slot_t slot_base, in slot_t slot_count, in slot_t offset) {
    return offset < slot_count && offset < NUM_SLOTS && slot_base < NUM_SLOTS &&
           slot_base + offset < NUM_SLOTS;
}

// The slot's aggregation copy for this iteration's parity.
reg_index_t agg_index(in iteration_t iteration, in slot_t slot) {
    return ((iteration & 1) << SLOT_BITS) | (slot & SLOT_MASK);
}

#endif  /* HOTAGG_SIZES_P4 */
