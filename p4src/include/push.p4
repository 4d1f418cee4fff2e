/*
 * hotagg: PUSH, aggregation with exactly-once dedup (fragment of HotaggIngress).
 * docs/design.md §2 "PUSH" is the normative pseudo-code; the macros below follow it line
 * by line. Included inside `control HotaggIngress`; the macros expand in its apply block.
 */
#ifndef HOTAGG_PUSH_P4
#define HOTAGG_PUSH_P4

    reg_index_t dedup_index;
    seq_t dedup_last_seq;
    bool push_fresh;        // a new seq: look up and aggregate its entries
    bool push_admitted;     // fresh or duplicate: finish with the mask (ack or forward)
    bit<8> removed_count;   // entries removed from the packet
    bit<16> removed_bytes;  // = ENTRY_LEN * removed_count

// Checks and dedup before any lookup. seq 0 is MALFORMED and worker_id >= MAX_WORKERS is
// BAD_WORKER (in that order); a seq seen at its dedup cell is a duplicate that re-sends the
// stored mask; an older seq is stale and dropped.
#define HOTAGG_PUSH_ADMIT()                                                            \
    {                                                                                  \
        if (hdr.hotagg.seq == 0) {                                                     \
            HOTAGG_DROP(STAT_MALFORMED);                                               \
        } else if (hdr.hotagg.worker_id >= MAX_WORKERS) {                              \
            HOTAGG_DROP(STAT_BAD_WORKER);                                              \
        } else {                                                                       \
            stats.count(STAT_PUSH);                                                    \
            dedup_index =                                                              \
                ((((reg_index_t)job_idx) & DEDUP_JOB_MASK) << DEDUP_JOB_SHIFT) |       \
                ((((reg_index_t)hdr.hotagg.worker_id) & DEDUP_WORKER_MASK)             \
                     << DEDUP_WORKER_SHIFT) |                                          \
                (hdr.hotagg.seq & DEDUP_SEQ_MASK);                                     \
            dedup_seq.read(dedup_last_seq, dedup_index);                               \
            if (dedup_last_seq == hdr.hotagg.seq) {                                    \
                stats.count(STAT_PUSH_DUP);                                            \
                dedup_mask.read(entry_mask, dedup_index);                              \
                push_admitted = true;                                                  \
            } else if (dedup_last_seq > hdr.hotagg.seq) {                              \
                HOTAGG_DROP(STAT_PUSH_STALE);                                          \
            } else {                                                                   \
                entry_mask = 0;                                                        \
                push_fresh = true;                                                     \
                push_admitted = true;                                                  \
            }                                                                          \
        }                                                                              \
    }

// Aggregate entry I into its slot copy for this iteration. The copy is claimed by a lazy
// reset when it holds another iteration; it adds only when it holds the same key; an add
// that would overflow int32 is refused (the PS sums that entry in int64).
#define HOTAGG_PUSH_ENTRY(I)                                                           \
    {                                                                                  \
        if (slot_ok##I) {                                                              \
            agg_index = ((hdr.hotagg.iteration & 1) << SLOT_BITS) |                    \
                        (slot##I & SLOT_MASK);                                         \
            entry_applied = false;                                                     \
            agg_iter.read(cell_iter, agg_index);                                       \
            if (cell_iter != hdr.hotagg.iteration) {                                   \
                agg_iter.write(agg_index, hdr.hotagg.iteration);                       \
                agg_key.write(agg_index, hdr.entries[I].key);                          \
                agg_value.write(agg_index, hdr.entries[I].value);                      \
                entry_applied = true;                                                  \
            } else {                                                                   \
                agg_key.read(cell_key, agg_index);                                     \
                if (cell_key == hdr.entries[I].key) {                                  \
                    agg_value.read(cell_value, agg_index);                             \
                    cell_sum = cell_value + hdr.entries[I].value;                      \
                    /* signed overflow: both addends share a sign the sum lacks */     \
                    if (cell_value[31:31] == hdr.entries[I].value[31:31] &&            \
                        cell_sum[31:31] != cell_value[31:31]) {                        \
                        stats.count(STAT_OVERFLOW);                                    \
                    } else {                                                           \
                        agg_value.write(agg_index, cell_sum);                          \
                        entry_applied = true;                                          \
                    }                                                                  \
                } else {                                                               \
                    stats.count(STAT_SLOT_CONFLICT);                                   \
                }                                                                      \
            }                                                                          \
            if (entry_applied) {                                                       \
                entry_mask = entry_mask | (8w1 << I);                      \
                stats.count(STAT_HOT_APPLIED);                                         \
            }                                                                          \
        }                                                                              \
    }

// Remember what this seq did, so a duplicate re-acks and re-forwards exactly the same.
#define HOTAGG_PUSH_RECORD()                                                           \
    {                                                                                  \
        dedup_seq.write(dedup_index, hdr.hotagg.seq);                                  \
        dedup_mask.write(dedup_index, entry_mask);                                     \
    }

// Entry I: removed if its mask bit is set (applied in the switch), else left for the PS.
#define HOTAGG_PUSH_TRIM(I)                                                            \
    {                                                                                  \
        if (hdr.entries[I].isValid()) {                                                \
            if ((entry_mask & (8w1 << I)) != 0) {                          \
                hdr.entries[I].setInvalid();                                           \
                removed_count = removed_count + 1;                                     \
                removed_bytes = removed_bytes + ENTRY_LEN;                             \
            } else {                                                                   \
                stats.count(STAT_COLD_FORWARDED);                                      \
            }                                                                          \
        }                                                                              \
    }

// header.mask = mask; remove the applied entries (all of them when everything was applied)
// and shrink count and both lengths; ack from the switch if nothing is left for the PS,
// else forward the rest to the PS.
#define HOTAGG_PUSH_FINISH()                                                           \
    {                                                                                  \
        hdr.hotagg.mask = entry_mask;                                                  \
        HOTAGG_PUSH_TRIM(0);                                                           \
        HOTAGG_PUSH_TRIM(1);                                                           \
        HOTAGG_PUSH_TRIM(2);                                                           \
        HOTAGG_PUSH_TRIM(3);                                                           \
        HOTAGG_PUSH_TRIM(4);                                                           \
        HOTAGG_PUSH_TRIM(5);                                                           \
        HOTAGG_PUSH_TRIM(6);                                                           \
        HOTAGG_PUSH_TRIM(7);                                                           \
        hdr.hotagg.count = hdr.hotagg.count - removed_count;                           \
        hdr.ipv4.totalLen = hdr.ipv4.totalLen - removed_bytes;                         \
        hdr.udp.length = hdr.udp.length - removed_bytes;                               \
        if (entry_mask == present_mask) {                                              \
            HOTAGG_MAKE_REPLY(OP_PUSH_ACK);                                            \
            stats.count(STAT_PUSH_SWITCH_ACK);                                         \
        }                                                                              \
    }

#endif  /* HOTAGG_PUSH_P4 */
