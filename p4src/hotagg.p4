/*
 * hotagg: in-network aggregation of hot parameters for a parameter server (P4_16, v1model,
 * BMv2 simple_switch_grpc --cpu-port 255).
 *
 * docs/design.md §1-2 is the normative contract; the embedded target (softswitch/) runs the
 * same pipeline byte for byte. This file only declares and sequences controls; each concern
 * lives in one file of p4src/include/. Tables, actions and registers declared inside those
 * controls keep the P4Info names of docs/design.md §2 (HotaggIngress.<name>) through
 * @name(".HotaggIngress.<name>"); registers live in controls that are instantiated once
 * (Dedup, SlotStore). Controls that count take the stats counter as a constructor argument.
 * Per-packet state is local_metadata_t (headers.p4). Controls applied once per packet take
 * narrow typed parameters; the per-entry ones (HotKeyLookup, SlotStore) take hdr and meta
 * whole, because p4c copies narrower arguments at every call and BMv2 pays a table per copy.
 *
 * Compile: p4c-bm2-ss --p4v 16 --p4runtime-files build/hotagg.p4info.txtpb \
 *              -o build/hotagg.json p4src/hotagg.p4
 */
#include <core.p4>
#include <v1model.p4>

#include "include/types.p4"
#include "include/sizes.p4"
#include "include/ids.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/checksum.p4"
#include "include/forwarding.p4"
#include "include/jobs.p4"
#include "include/drop_sim.p4"
#include "include/hot_key_lookup.p4"
#include "include/dedup.p4"
#include "include/slot_store.p4"
#include "include/tenancy.p4"
#include "include/sketch.p4"
#include "include/leaves.p4"

control HotaggIngress(inout headers_t hdr,
                      inout local_metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    // Declaration order is P4Info order (tables, actions, registers).

    // One cell per reason (STAT_* in types.p4). BMv2 counts the packet's length as
    // received, the same number the embedded target counts.
    @id(HOTAGG_ID_COUNTER_STATS)
    counter(STATS_SIZE, CounterType.packets_and_bytes) stats;

    Forwarding(stats) forwarding;
    JobTable() job_table;
    DropSim() drop_simulator;
    // One hot-key table instance per entry position (p4c applies a table once per pass).
    HotKeyLookup() lookup0;
    HotKeyLookup() lookup1;
    HotKeyLookup() lookup2;
    HotKeyLookup() lookup3;
    HotKeyLookup() lookup4;
    HotKeyLookup() lookup5;
    HotKeyLookup() lookup6;
    HotKeyLookup() lookup7;
    Dedup() dedup;
    SlotStore(stats) slots;
    FromController() from_controller;
    Admission() admission;
    SketchConfig() sketch_config;
    Sketch() sketch;
    // Aggregation at every leaf (leaves.p4, docs/design.md §7).
    ServiceAddress() service;
    ChainNext() chain;
    FlushCount() flushes;
    // Consistency modes (slot_store.p4, docs/design.md §8).
    CollectedIter() collected;

    @hidden
    action count_and_drop(stat_t reason) {
        stats.count(reason);
        mark_to_drop(standard_metadata);
        meta.dropped = true;
    }

    // Turn a request into the switch's reply reply_op: mark it, swap IPv4 addresses and UDP
    // ports; Forwarding then routes it back to the sender. (An action, not a control: p4c
    // would copy the three headers in and out of a control at each of its four calls.)
    @hidden
    action make_reply(op_t reply_op) {
        hdr.hotagg.op = reply_op;
        hdr.hotagg.flags = hdr.hotagg.flags | FLAG_FROM_SWITCH;
        ipv4_addr_t addr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = addr;
        l4_port_t port = hdr.udp.srcPort;
        hdr.udp.srcPort = hdr.udp.dstPort;
        hdr.udp.dstPort = port;
    }

    // A PUSH whose every present entry the switch applied: none is left for the PS.
    @hidden
    action remove_all_entries() {
        bit<16> removed_bytes = ((bit<16>)hdr.hotagg.count) * ENTRY_LEN;
        hdr.entries[0].setInvalid();
        hdr.entries[1].setInvalid();
        hdr.entries[2].setInvalid();
        hdr.entries[3].setInvalid();
        hdr.entries[4].setInvalid();
        hdr.entries[5].setInvalid();
        hdr.entries[6].setInvalid();
        hdr.entries[7].setInvalid();
        hdr.hotagg.count = 0;
        hdr.ipv4.totalLen = hdr.ipv4.totalLen - removed_bytes;
        hdr.udp.length = hdr.udp.length - removed_bytes;
    }

    // FLUSH (docs/design.md §7): entry position i carries slot offset (aux << 3) + i, so
    // HOTAGG_PROCESS_ENTRY walks the batch with the SlotStore it already applies per
    // position (a SlotStore of its own would enlarge every packet's PHV).
    @hidden
    action load_flush_batch() {
        value_t first = ((value_t)hdr.hotagg.aux) << FLUSH_BATCH_BITS;
        HOTAGG_LOAD_OFFSET(0)
        HOTAGG_LOAD_OFFSET(1)
        HOTAGG_LOAD_OFFSET(2)
        HOTAGG_LOAD_OFFSET(3)
        HOTAGG_LOAD_OFFSET(4)
        HOTAGG_LOAD_OFFSET(5)
        HOTAGG_LOAD_OFFSET(6)
        HOTAGG_LOAD_OFFSET(7)
    }

    // FLUSH -> partial PUSH from this switch to the PS: the untouched positions were
    // removed, the rest (count of them) grow both lengths; from the FLUSH's destination (this
    // switch's service address) to its source, UDP port HOTAGG_PORT to HOTAGG_PORT (a
    // request, which the switches on the way parse and the PS's socket receives); seq,
    // worker_id and aux stay.
    @hidden
    action make_partial_push() {
        hdr.hotagg.count = MAX_ENTRIES - meta.removed_count;
        bit<16> added_bytes = ((bit<16>)hdr.hotagg.count) * ENTRY_LEN;
        hdr.ipv4.totalLen = hdr.ipv4.totalLen + added_bytes;
        hdr.udp.length = hdr.udp.length + added_bytes;
        hdr.udp.srcPort = HOTAGG_PORT;
        hdr.udp.checksum = 0;
        hdr.hotagg.op = OP_PUSH;
        hdr.hotagg.flags = hdr.hotagg.flags | FLAG_FROM_SWITCH;
        hdr.hotagg.mask = 0;
        hdr.hotagg.cached = 0;
        ipv4_addr_t addr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = addr;
    }

    @hidden
    action shrink_by_removed() {
        bit<16> removed_bytes = ((bit<16>)meta.removed_count) * ENTRY_LEN;
        hdr.hotagg.count = hdr.hotagg.count - meta.removed_count;
        hdr.ipv4.totalLen = hdr.ipv4.totalLen - removed_bytes;
        hdr.udp.length = hdr.udp.length - removed_bytes;
    }

    apply {
        meta.dropped = false;
        meta.is_hotagg = false;
        meta.lookup_keys = false;
        meta.push_fresh = false;
        meta.rewrite = false;
        meta.mask = 0;
        meta.cached = 0;
        meta.removed_count = 0;
        meta.job.found = false;
        meta.sketch.on = false;
        meta.sketch.report = false;
        meta.transit = false;
        bool switch_op = false;     // op 1, 3, 7 or 9 of a known job: processed here

        if (hdr.packet_out.isValid()) {
            // Step 1: from the controller.
            from_controller.apply(hdr, standard_metadata);
        } else if (!hdr.ipv4.isValid()) {
            // Step 2: not IPv4 (nor a PacketOut): dropped without a stat.
            mark_to_drop(standard_metadata);
            meta.dropped = true;
        } else {
            if (hdr.udp.isValid()) {
                if (hdr.udp.srcPort == HOTAGG_PORT || hdr.udp.dstPort == HOTAGG_PORT) {
                    meta.is_hotagg = true;
                }
            }

            // Step 3: every hotagg packet passes the drop simulator.
            if (meta.is_hotagg) {
                bool lost;
                drop_simulator.apply(lost);
                if (lost) {
                    count_and_drop(STAT_SIM_DROP);
                }
            }

            // Step 5a's lookup (leaves.p4): the service address, for PS ops and partial
            // PUSHes only. Applied here, before the checks that use it below; a worker's
            // PUSH (the hot path) passes with this one condition.
            if (meta.is_hotagg && !meta.dropped && hdr.hotagg.isValid() &&
                (hdr.hotagg.op != OP_PUSH || (hdr.hotagg.flags & FLAG_FROM_SWITCH) != 0)) {
                service.apply(hdr, meta);
            }

            // Steps 4-5, requests and replies alike, in this order: MALFORMED (parser error,
            // version, UDP length), UNKNOWN_OP; then requests TRANSIT, UNKNOWN_JOB, and
            // tenancy: FOREIGN_WORKER / FOREIGN_PS for requests, FOREIGN_REPLY for replies.
            if (meta.is_hotagg && !meta.dropped) {
                // A request goes to port 18497. A reply op from port 18497 is a reply even
                // when it goes to port 18497: the switch's answer to a PS, whose requests
                // leave from its port 18497 (and so come back to it).
                bool reply_op = hdr.hotagg.op == OP_PUSH_ACK ||
                                hdr.hotagg.op == OP_PULL_REPLY ||
                                hdr.hotagg.op == OP_DONE_ACK ||
                                hdr.hotagg.op == OP_COLLECT_REPLY ||
                                hdr.hotagg.op == OP_WRITEBACK_ACK;
                bool request = hdr.udp.dstPort == HOTAGG_PORT &&
                               !(hdr.udp.srcPort == HOTAGG_PORT && reply_op);
                bool check_origin = false;  // step 5b applies
                bool ps_op = true;          // ps_admission decides (else worker_admission)
                // A reply's entries are not extracted (parse_reply): the frame must hold
                // them, as the parser checks for a request's.
                if (standard_metadata.parser_error != error.NoError ||
                    !hdr.hotagg.isValid() ||
                    hdr.hotagg.version != HOTAGG_VERSION ||
                    hdr.udp.length != UDP_HEADER_LEN + HEADER_LEN +
                                      ((bit<16>)hdr.hotagg.count) * ENTRY_LEN ||
                    (!request && standard_metadata.packet_length <
                                 ETH_IPV4_LEN + (bit<32>)hdr.udp.length)) {
                    count_and_drop(STAT_MALFORMED);
                } else if (hdr.hotagg.op == 0 || hdr.hotagg.op > OP_MAX) {
                    count_and_drop(STAT_UNKNOWN_OP);
                } else if (request && meta.transit) {
                    // Step 5a: a PS op for another switch's service address is routed on
                    // unchecked, as a reply is; its addressee checks and answers it.
                    stats.count(STAT_TRANSIT);
                } else if (request) {
                    job_table.apply(hdr.hotagg.job_id, meta.job);
                    if (!meta.job.found) {
                        count_and_drop(STAT_UNKNOWN_JOB);
                    } else {
                        check_origin = true;
                        ps_op = hdr.hotagg.op == OP_COLLECT || hdr.hotagg.op == OP_WRITEBACK ||
                                hdr.hotagg.op == OP_FLUSH;
                    }
                } else if (hdr.hotagg.op == OP_PUSH_ACK || hdr.hotagg.op == OP_PULL_REPLY ||
                           hdr.hotagg.op == OP_DONE_ACK) {
                    // A reply a worker takes: only from where its job's PS's traffic arrives
                    // (the switch's own replies carry the PS's address and come that way).
                    check_origin = true;
                }
                // Step 5b, tenancy: only from the (port, address) admitted for the job's
                // worker (worker ops) or its PS (PS ops, and replies to workers).
                // One call site: p4c applies each of Admission's tables at most once.
                if (check_origin) {
                    bool admitted;
                    admission.apply(hdr.hotagg.job_id, hdr.hotagg.worker_id,
                                    standard_metadata.ingress_port, hdr.ipv4.srcAddr,
                                    ps_op, admitted);
                    if (!admitted) {
                        if (!request) {
                            count_and_drop(STAT_FOREIGN_REPLY);
                        } else if (ps_op) {
                            count_and_drop(STAT_FOREIGN_PS);
                        } else {
                            count_and_drop(STAT_FOREIGN_WORKER);
                        }
                    }
                }
            }

            // Step 5c: a checked request that came with TTL 0 or 1 could not be routed on,
            // forwarded or answered (step 7 would drop it): dropped here, before step 6 reads
            // or writes any register, so a frame that goes nowhere changes no state.
            if (meta.job.found && !meta.dropped && hdr.ipv4.ttl <= 1) {
                count_and_drop(STAT_TTL_EXPIRED);
            }

            // Step 6: a checked request of a known job.
            if (meta.job.found && !meta.dropped) {
                // Entries 0..count-1 are present (count <= MAX_ENTRIES, checked by the parser).
                meta.present = (entry_mask_t)((16w1 << hdr.hotagg.count) - 1);
                if (hdr.hotagg.op == OP_PUSH) {
                    // seq 0 is MALFORMED and worker_id >= MAX_WORKERS is BAD_WORKER (in that
                    // order); then dedup: a fresh seq is looked up and aggregated, a
                    // duplicate re-sends the stored mask, a stale one is dropped.
                    if (hdr.hotagg.seq == 0) {
                        count_and_drop(STAT_MALFORMED);
                    } else if (hdr.hotagg.worker_id >= MAX_WORKERS) {
                        count_and_drop(STAT_BAD_WORKER);
                    } else if ((hdr.hotagg.flags & FLAG_FROM_SWITCH) != 0 &&
                               (meta.service_addr == 0 ||
                                meta.service_addr == SERVICE_TRANSIT)) {
                        // A partial PUSH where no service address is set, or at a switch
                        // that only routes (a spine): only an aggregating switch absorbs
                        // it; routed on unchanged.
                        stats.count(STAT_TRANSIT);
                    } else {
                        stats.count(STAT_PUSH);
                        DedupVerdict verdict;
                        dedup.apply(false, meta.job.index, hdr.hotagg.worker_id,
                                    hdr.hotagg.seq, meta.mask, verdict);
                        if (verdict == DedupVerdict.STALE) {
                            count_and_drop(STAT_PUSH_STALE);
                        } else {
                            if (verdict == DedupVerdict.DUPLICATE) {
                                stats.count(STAT_PUSH_DUP);
                            }
                            switch_op = true;
                            meta.push_fresh = verdict == DedupVerdict.FRESH;
                            meta.lookup_keys = meta.push_fresh;
                            if (meta.push_fresh) {
                                collected.apply(false, false, meta.job.index,
                                                hdr.hotagg.iteration, meta.collected,
                                                meta.flushed);
                                if (meta.flushed == hdr.hotagg.iteration) {
                                    // §7: this switch's sums of the iteration were
                                    // flushed; adding to them now would be lost, so every
                                    // entry goes on toward the PS (no lookup, no sketch).
                                    meta.lookup_keys = false;
                                    stats.count(STAT_SLOT_FLUSHED);
                                } else {
                                    sketch_config.apply(meta);  // cold-key sketch on or off
                                }
                            }
                        }
                    }
                } else if (hdr.hotagg.op == OP_PULL) {
                    stats.count(STAT_PULL);
                    switch_op = true;
                    meta.lookup_keys = true;
                    meta.rewrite = true;
                } else if (hdr.hotagg.op == OP_COLLECT) {
                    stats.count(STAT_COLLECT);
                    switch_op = true;
                    meta.rewrite = true;
                    collected.apply(true, false, meta.job.index, hdr.hotagg.iteration,
                                    meta.collected, meta.flushed);
                } else if (hdr.hotagg.op == OP_WRITEBACK) {
                    stats.count(STAT_WRITEBACK);
                    switch_op = true;
                    meta.lookup_keys = true;
                } else if (hdr.hotagg.op == OP_FLUSH) {
                    // A FLUSH carries no entries and becomes a PUSH: its seq and worker_id
                    // are checked as a PUSH's.
                    if (hdr.hotagg.count != 0 || hdr.hotagg.seq == 0) {
                        count_and_drop(STAT_MALFORMED);
                    } else if (hdr.hotagg.worker_id >= MAX_WORKERS) {
                        count_and_drop(STAT_BAD_WORKER);
                    } else {
                        // At its addressee (§7): its 8 offsets go through the entry
                        // positions as a COLLECT's would; the touched ones become the
                        // entries of a partial PUSH (below).
                        stats.count(STAT_FLUSH);
                        switch_op = true;
                        meta.rewrite = true;
                        load_flush_batch();
                        collected.apply(true, true, meta.job.index, hdr.hotagg.iteration,
                                        meta.collected, meta.flushed);
                    }
                } else {
                    // Ops 2, 4, 5, 6, 8, 10 pass unchanged.
                    stats.count(STAT_PASS);
                }
            }

            if (switch_op) {
                HOTAGG_PROCESS_ENTRY(0)
                HOTAGG_PROCESS_ENTRY(1)
                HOTAGG_PROCESS_ENTRY(2)
                HOTAGG_PROCESS_ENTRY(3)
                HOTAGG_PROCESS_ENTRY(4)
                HOTAGG_PROCESS_ENTRY(5)
                HOTAGG_PROCESS_ENTRY(6)
                HOTAGG_PROCESS_ENTRY(7)

                // At most one cold key per packet reached the sketch's threshold.
                if (meta.sketch.report) {
                    digest<sketch_digest_t>(SKETCH_DIGEST_RECEIVER, meta.sketch.digest);
                }

                // The op's answer (the request mask was read by the entries; now it is
                // replaced by the mask the op built).
                hdr.hotagg.mask = meta.mask;
                if (hdr.hotagg.op == OP_PUSH) {
                    if (meta.push_fresh) {
                        DedupVerdict recorded;
                        dedup.apply(true, meta.job.index, hdr.hotagg.worker_id,
                                    hdr.hotagg.seq, meta.mask, recorded);
                    }
                    // Applied entries are removed, shrinking count and both lengths;
                    // nothing left for the PS (every present entry applied): the switch acks.
                    if (meta.mask == meta.present) {
                        if ((hdr.hotagg.flags & FLAG_FROM_SWITCH) != 0) {
                            // A partial PUSH absorbed whole (docs/design.md §7): never
                            // acked; a fresh one is counted for the PS's COLLECT.
                            if (meta.push_fresh) {
                                flush_count_t absorbed;
                                flushes.apply(true, meta.job.index, hdr.hotagg.iteration,
                                              absorbed);
                                stats.count(STAT_FLUSH_ABSORBED);
                            }
                            mark_to_drop(standard_metadata);
                            meta.dropped = true;
                        } else {
                            remove_all_entries();
                            make_reply(OP_PUSH_ACK);
                            stats.count(STAT_PUSH_SWITCH_ACK);
                        }
                    } else if (meta.mask != 0) {
                        HOTAGG_REMOVE_IF_APPLIED(0)
                        HOTAGG_REMOVE_IF_APPLIED(1)
                        HOTAGG_REMOVE_IF_APPLIED(2)
                        HOTAGG_REMOVE_IF_APPLIED(3)
                        HOTAGG_REMOVE_IF_APPLIED(4)
                        HOTAGG_REMOVE_IF_APPLIED(5)
                        HOTAGG_REMOVE_IF_APPLIED(6)
                        HOTAGG_REMOVE_IF_APPLIED(7)
                        shrink_by_removed();
                    }
                } else if (hdr.hotagg.op == OP_PULL) {
                    // All-or-nothing: answered only when every entry hit (and there is one);
                    // otherwise on to the PS, hit entries carrying the cached values.
                    if (hdr.hotagg.count > 0 && meta.mask == meta.present) {
                        make_reply(OP_PULL_REPLY);
                        stats.count(STAT_PULL_HIT);
                    } else {
                        stats.count(STAT_PULL_MISS);
                    }
                } else if (hdr.hotagg.op == OP_COLLECT) {
                    hdr.hotagg.cached = meta.cached;
                    // The partial PUSHes absorbed whole in this iteration (§7), mod 2^16.
                    flush_count_t absorbed;
                    flushes.apply(false, meta.job.index, hdr.hotagg.iteration, absorbed);
                    hdr.hotagg.aux = (bit<16>)absorbed;
                    make_reply(OP_COLLECT_REPLY);
                } else if (hdr.hotagg.op == OP_FLUSH) {
                    // The slots of the batch written in this iteration stay, in offset
                    // order (the deparser emits valid elements only); routed to the PS
                    // below, not processed as a PUSH here (no second parse in this pass).
                    HOTAGG_KEEP_IF_TOUCHED(0)
                    HOTAGG_KEEP_IF_TOUCHED(1)
                    HOTAGG_KEEP_IF_TOUCHED(2)
                    HOTAGG_KEEP_IF_TOUCHED(3)
                    HOTAGG_KEEP_IF_TOUCHED(4)
                    HOTAGG_KEEP_IF_TOUCHED(5)
                    HOTAGG_KEEP_IF_TOUCHED(6)
                    HOTAGG_KEEP_IF_TOUCHED(7)
                    make_partial_push();
                } else if ((hdr.hotagg.flags & FLAG_CHAIN) != 0) {
                    // A chained WRITEBACK (§7): on to the next leaf, the PS still its
                    // source; the last one acks it without the entries.
                    chain.apply(meta);
                    if (meta.chain_next != 0) {
                        hdr.ipv4.dstAddr = meta.chain_next;
                        stats.count(STAT_CHAIN_FORWARD);
                    } else {
                        remove_all_entries();
                        make_reply(OP_WRITEBACK_ACK);
                    }
                } else {
                    make_reply(OP_WRITEBACK_ACK);
                }
                // A switch op the switch processed (and kept): no UDP checksum.
                hdr.udp.checksum = 0;
            }

            // Step 7: route on the (possibly swapped) destination.
            if (!meta.dropped) {
                forwarding.apply(hdr, meta.is_hotagg, standard_metadata);
            }
        }
    }
}

// Nothing happens after the traffic manager.
control HotaggEgress(inout headers_t hdr,
                     inout local_metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    apply { }
}

V1Switch(HotaggParser(),
         HotaggVerifyChecksum(),
         HotaggIngress(),
         HotaggEgress(),
         HotaggComputeChecksum(),
         HotaggDeparser()) main;
