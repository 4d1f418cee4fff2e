/*
 * hotagg: headers. Field names and widths match the Scapy layers in contract/layers.py.
 */
#ifndef HOTAGG_HEADERS_P4
#define HOTAGG_HEADERS_P4

/* ---- CPU port (BMv2 --cpu-port 255) ---- */
// Prepended by the switch to frames it sends to the controller (P4Runtime PacketIn
// metadata id 1 = ingress_port, id 2 = _pad).
@controller_header("packet_in")
header packet_in_header_t {
    port_t ingress_port;
    bit<7> _pad;
}

// Prepended by the controller to frames it sends out of a port (PacketOut metadata).
@controller_header("packet_out")
header packet_out_header_t {
    port_t egress_port;
    bit<7> _pad;
}

/* ---- Ethernet / IPv4 (IHL 5) / UDP ---- */
header ethernet_t {
    mac_addr_t dstAddr;
    mac_addr_t srcAddr;
    bit<16>    etherType;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      diffserv;
    bit<16>     totalLen;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     fragOffset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdrChecksum;
    ipv4_addr_t srcAddr;
    ipv4_addr_t dstAddr;
}

header udp_t {
    l4_port_t srcPort;
    l4_port_t dstPort;
    bit<16>   length;
    bit<16>   checksum;     // the switch writes 0 (no checksum) on every switch op it processes
}

/*
 * hotagg header (20 bytes, network byte order), after UDP with destination port 18497 (a
 * request) or source port 18497 (a reply):
 *
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +---------------+---------------+---------------+---------------+
 * |   version=1   |      op       |     flags     |     count     |
 * +---------------+---------------+---------------+---------------+
 * |            job_id             |           worker_id           |
 * +-------------------------------+-------------------------------+
 * |                              seq                              |
 * +---------------------------------------------------------------+
 * |                           iteration                           |
 * +---------------+---------------+-------------------------------+
 * |     mask      |    cached     |              aux              |
 * +---------------+---------------+-------------------------------+
 *
 * followed by `count` entries (12 bytes each), count <= MAX_ENTRIES = 8:
 *
 * +---------------------------------------------------------------+
 * |                           key (64)                            |
 * |                                                               |
 * +---------------------------------------------------------------+
 * |                   value (32, two's complement)                |
 * +---------------------------------------------------------------+
 *
 * flags: bit 0 FROM_SWITCH, bit 1 RETRANSMIT, bit 2 INVALIDATE (COLLECT only), bit 3 CHAIN
 * (WRITEBACK only). mask: bit i = entry position i (meaning per op, docs/design.md §1).
 * cached: per-entry bitmap set only in COLLECT_REPLY (bit i: entry i's slot caches the
 * expected key for iteration + 1); every other op leaves it as it came. aux: FLUSH's batch
 * (slot offsets 8 * aux .. 8 * aux + 7, kept in the partial PUSH it becomes), COLLECT_REPLY's
 * flush count of (job, iteration) (leaves.p4); 0 elsewhere and ignored there. value: fixed
 * point, real = value / 2^16.
 */
header hotagg_t {
    bit<8>       version;
    op_t         op;
    flags_t      flags;
    bit<8>       count;
    job_id_t     job_id;
    worker_id_t  worker_id;
    seq_t        seq;
    iteration_t  iteration;
    entry_mask_t mask;
    entry_mask_t cached;        // COLLECT_REPLY only; written by HotaggIngress after COLLECT
    bit<16>      aux;           // FLUSH: batch; COLLECT_REPLY: flush count; else 0, ignored
}

header entry_t {
    hot_key_t key;
    value_t   value;
}

struct headers_t {
    packet_in_header_t   packet_in;
    packet_out_header_t  packet_out;
    ethernet_t           ethernet;
    ipv4_t               ipv4;
    udp_t                udp;
    hotagg_t             hotagg;
    // Removing an entry = setInvalid() on its element: the deparser emits only the valid
    // elements, in order, so the remaining entries keep their order.
    entry_t[MAX_ENTRIES] entries;
}

/* ---- per-packet state (user metadata) ---- */

// The job of the current request (the jobs table's set_job).
struct job_meta_t {
    bool        found;
    job_index_t index;          // dense 0..MAX_JOBS-1: the dedup state's job number
    slot_t      slot_base;      // the job's slots are [slot_base, slot_base + slot_count)
    slot_t      slot_count;
}

// The entry position being processed (HOTAGG_PROCESS_ENTRY): written afresh for each
// position and read only there. The per-entry controls work on this copy of the entry, so
// they need no header stack index (p4c has no loops, and BMv2 keys cannot name a stack
// element without a copy anyway).
struct entry_meta_t {
    entry_mask_t position;      // 1 << i for position i
    hot_key_t    key;           // entries[i], as received; PULL and COLLECT rewrite it
    value_t      value;
    bool         hit;           // lookup_i: the key is hot for this job ...
    slot_t       offset;        // ... at this slot offset, relative to job.slot_base
    // Where its slot state lives: the slot's copy for this iteration and its cache cell
    // (valid once the offset is checked). Computed apart from the actions that use them:
    // p4c would otherwise substitute the expression into every register call, and BMv2
    // needs one more temporary field per call, reset on every packet.
    reg_index_t  copy_index;
    reg_index_t  cell_index;
}

// Sketch (sketch.p4): the digest of a cold key whose estimate reached the threshold (P4Info
// digest "sketch_digest_t"), and the sketch's per-packet state.
struct sketch_digest_t {
    job_id_t  job_id;
    hot_key_t key;
    bit<32>   epoch;            // the sketch_config epoch it was counted in
    bit<32>   estimate;         // count-min estimate of the key in that epoch, >= threshold
}

struct sketch_meta_t {
    bool            on;         // a fresh PUSH and the sketch's threshold is not 0
    bool            report;     // an entry of this packet is reported (one digest per packet)
    bit<32>         epoch;      // from sketch_config
    bit<32>         threshold;
    sketch_digest_t digest;
}

struct local_metadata_t {
    bit<8>       entries_left;  // parser loop counter over hdr.entries (as in the tutorials' mri)
    // Set once the packet is marked to drop; nothing later may set egress_spec again, or
    // BMv2 forwards the packet after all (p4lang/behavioral-model#677).
    bool         dropped;
    bool         is_hotagg;     // UDP from or to HOTAGG_PORT (a request or a reply)
    bool         lookup_keys;   // this request's entries are looked up in the hot-key tables
    bool         push_fresh;    // PUSH of a new seq: its entries are aggregated
    bool         rewrite;       // PULL, COLLECT: entries leave as EntryOps left meta.entry
    entry_mask_t present;       // bit i set iff entries[i] is present: (1 << count) - 1
    entry_mask_t mask;          // the mask the op builds; becomes hdr.hotagg.mask
    entry_mask_t cached;        // COLLECT: the reply's `cached` bitmap
    bit<8>       removed_count; // PUSH: entries removed from the packet
    // leaves.p4 (docs/design.md §7): service_address, read for PS ops and partial PUSHes.
    ipv4_addr_t  service_addr;  // 0: none set (every switch answers PS ops, none absorbs)
    bool         transit;       // a PS op addressed to another switch: routed on unchecked
    ipv4_addr_t  chain_next;    // chained WRITEBACK: the next leaf's service address, or 0
    // slot_store.p4 CollectedIter (docs/design.md §8), read for a fresh PUSH: the newest
    // iteration of the job whose slot copies the PS has read; older unread copies are busy.
    iteration_t  collected;
    // ... and the iteration the PS last FLUSHed this switch for (§7): a fresh PUSH of it is
    // not aggregated here.
    iteration_t  flushed;
    job_meta_t   job;
    entry_meta_t entry;
    sketch_meta_t sketch;
}

#endif  /* HOTAGG_HEADERS_P4 */
