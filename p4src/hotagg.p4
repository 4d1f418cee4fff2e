/*
 * hotagg: in-network aggregation of hot parameters for a parameter server (P4_16, v1model,
 * BMv2 simple_switch_grpc --cpu-port 255).
 *
 * docs/design.md §1-2 is the normative contract; the embedded target (softswitch/) runs the
 * same pipeline byte for byte. This file only declares and sequences: each concern lives in
 * p4src/include/. The objects of HotaggIngress are declared by fragments included inside
 * the control, so that their P4Info names are HotaggIngress.<name>; the per-entry logic is
 * written out for the 8 entry positions by macros, because the state it touches (registers)
 * is shared by all positions and p4c has no loops.
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
#include "include/hot_key_lookup.p4"

control HotaggIngress(inout headers_t hdr,
                      inout local_metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    // Declaration order is P4Info order.
#include "include/stats.p4"
#include "include/forwarding.p4"
#include "include/jobs.p4"
#include "include/drop_sim.p4"
#include "include/lookups.p4"
#include "include/registers.p4"
#include "include/push.p4"
#include "include/pull.p4"
#include "include/collect.p4"
#include "include/writeback.p4"

    bool is_hotagg;     // UDP from or to HOTAGG_PORT (a request or a reply)
    bool switch_op;     // a request with op 1, 3, 7 or 9: processed by the switch
    bool do_lookup;     // this request's entries are looked up in the hot-key tables

    apply {
        dropped = false;
        is_hotagg = false;
        switch_op = false;
        do_lookup = false;
        job_found = false;
        job_idx = 0;
        job_slot_base = 0;
        job_slot_count = 0;
        drop_rate = 0;
        drop_draw = 0;
        present_mask = 0;
        entry_mask = 0;
        push_fresh = false;
        push_admitted = false;
        dedup_index = 0;
        dedup_last_seq = 0;
        removed_count = 0;
        removed_bytes = 0;
        HOTAGG_ENTRY_RESET(0);
        HOTAGG_ENTRY_RESET(1);
        HOTAGG_ENTRY_RESET(2);
        HOTAGG_ENTRY_RESET(3);
        HOTAGG_ENTRY_RESET(4);
        HOTAGG_ENTRY_RESET(5);
        HOTAGG_ENTRY_RESET(6);
        HOTAGG_ENTRY_RESET(7);

        if (hdr.packet_out.isValid()) {
            // Step 1: from the controller.
            HOTAGG_PACKET_OUT();
        } else if (!hdr.ipv4.isValid()) {
            // Step 2: not IPv4 (nor a PacketOut): dropped without a stat.
            mark_to_drop(standard_metadata);
            dropped = true;
        } else {
            if (hdr.udp.isValid()) {
                if (hdr.udp.srcPort == HOTAGG_PORT || hdr.udp.dstPort == HOTAGG_PORT) {
                    is_hotagg = true;
                }
            }

            // Step 3: every hotagg packet passes the drop simulator.
            if (is_hotagg) {
                drop_sim.apply();
                HOTAGG_DROP_SIM_DECIDE();
            }

            // Steps 4-5, requests only: MALFORMED, UNKNOWN_OP, then UNKNOWN_JOB.
            if (is_hotagg && !dropped && hdr.udp.dstPort == HOTAGG_PORT) {
                HOTAGG_CHECK_REQUEST();
                if (!dropped) {
                    jobs.apply();
                    HOTAGG_CHECK_JOB();
                }
            }

            // Step 6: a checked request of a known job.
            if (job_found && !dropped) {
                if (hdr.hotagg.op == OP_PUSH) {
                    switch_op = true;
                    HOTAGG_PUSH_ADMIT();
                    do_lookup = push_fresh;
                } else if (hdr.hotagg.op == OP_PULL) {
                    switch_op = true;
                    stats.count(STAT_PULL);
                    do_lookup = true;
                } else if (hdr.hotagg.op == OP_COLLECT) {
                    switch_op = true;
                    stats.count(STAT_COLLECT);
                } else if (hdr.hotagg.op == OP_WRITEBACK) {
                    switch_op = true;
                    stats.count(STAT_WRITEBACK);
                    do_lookup = true;
                } else {
                    // Ops 2, 4, 5, 6, 8, 10 pass unchanged.
                    stats.count(STAT_PASS);
                }

                // Lookup of entry i with hot-key table instance i, for present entries.
                if (do_lookup) {
                    if (hdr.entries[0].isValid()) {
                        lookup0.apply(hdr.hotagg.job_id, hdr.entries[0].key, hit0, offset0);
                    }
                    if (hdr.entries[1].isValid()) {
                        lookup1.apply(hdr.hotagg.job_id, hdr.entries[1].key, hit1, offset1);
                    }
                    if (hdr.entries[2].isValid()) {
                        lookup2.apply(hdr.hotagg.job_id, hdr.entries[2].key, hit2, offset2);
                    }
                    if (hdr.entries[3].isValid()) {
                        lookup3.apply(hdr.hotagg.job_id, hdr.entries[3].key, hit3, offset3);
                    }
                    if (hdr.entries[4].isValid()) {
                        lookup4.apply(hdr.hotagg.job_id, hdr.entries[4].key, hit4, offset4);
                    }
                    if (hdr.entries[5].isValid()) {
                        lookup5.apply(hdr.hotagg.job_id, hdr.entries[5].key, hit5, offset5);
                    }
                    if (hdr.entries[6].isValid()) {
                        lookup6.apply(hdr.hotagg.job_id, hdr.entries[6].key, hit6, offset6);
                    }
                    if (hdr.entries[7].isValid()) {
                        lookup7.apply(hdr.hotagg.job_id, hdr.entries[7].key, hit7, offset7);
                    }
                    HOTAGG_CHECK_SLOT(0);
                    HOTAGG_CHECK_SLOT(1);
                    HOTAGG_CHECK_SLOT(2);
                    HOTAGG_CHECK_SLOT(3);
                    HOTAGG_CHECK_SLOT(4);
                    HOTAGG_CHECK_SLOT(5);
                    HOTAGG_CHECK_SLOT(6);
                    HOTAGG_CHECK_SLOT(7);
                }

                if (hdr.hotagg.op == OP_PUSH) {
                    if (push_fresh) {
                        HOTAGG_PUSH_ENTRY(0);
                        HOTAGG_PUSH_ENTRY(1);
                        HOTAGG_PUSH_ENTRY(2);
                        HOTAGG_PUSH_ENTRY(3);
                        HOTAGG_PUSH_ENTRY(4);
                        HOTAGG_PUSH_ENTRY(5);
                        HOTAGG_PUSH_ENTRY(6);
                        HOTAGG_PUSH_ENTRY(7);
                        HOTAGG_PUSH_RECORD();
                    }
                    if (push_admitted) {
                        HOTAGG_PUSH_FINISH();
                    }
                } else if (hdr.hotagg.op == OP_PULL) {
                    HOTAGG_PULL_ENTRY(0);
                    HOTAGG_PULL_ENTRY(1);
                    HOTAGG_PULL_ENTRY(2);
                    HOTAGG_PULL_ENTRY(3);
                    HOTAGG_PULL_ENTRY(4);
                    HOTAGG_PULL_ENTRY(5);
                    HOTAGG_PULL_ENTRY(6);
                    HOTAGG_PULL_ENTRY(7);
                    HOTAGG_PULL_FINISH();
                } else if (hdr.hotagg.op == OP_COLLECT) {
                    HOTAGG_COLLECT_START();
                    HOTAGG_COLLECT_ENTRY(0);
                    HOTAGG_COLLECT_ENTRY(1);
                    HOTAGG_COLLECT_ENTRY(2);
                    HOTAGG_COLLECT_ENTRY(3);
                    HOTAGG_COLLECT_ENTRY(4);
                    HOTAGG_COLLECT_ENTRY(5);
                    HOTAGG_COLLECT_ENTRY(6);
                    HOTAGG_COLLECT_ENTRY(7);
                    HOTAGG_COLLECT_FINISH();
                } else if (hdr.hotagg.op == OP_WRITEBACK) {
                    HOTAGG_WRITEBACK_ENTRY(0);
                    HOTAGG_WRITEBACK_ENTRY(1);
                    HOTAGG_WRITEBACK_ENTRY(2);
                    HOTAGG_WRITEBACK_ENTRY(3);
                    HOTAGG_WRITEBACK_ENTRY(4);
                    HOTAGG_WRITEBACK_ENTRY(5);
                    HOTAGG_WRITEBACK_ENTRY(6);
                    HOTAGG_WRITEBACK_ENTRY(7);
                    HOTAGG_WRITEBACK_FINISH();
                }

                // A switch op the switch processed (and kept): no UDP checksum. (The op
                // field may already hold the reply op here.)
                if (switch_op && !dropped) {
                    hdr.udp.checksum = 0;
                }
            }

            // Step 7: route on the (possibly swapped) destination.
            if (!dropped) {
                switch (ipv4_lpm.apply().action_run) {
                    ipv4_forward: {
                        // A route out of CPU_PORT is a PacketIn too.
                        if (standard_metadata.egress_spec == CPU_PORT) {
                            HOTAGG_PACKET_IN();
                        }
                    }
                    drop: {
                        if (is_hotagg) {
                            stats.count(STAT_NO_ROUTE);
                        }
                    }
                }
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
