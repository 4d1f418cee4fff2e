/*
 * hotagg: COLLECT, the PS reads aggregated slots (fragment of HotaggIngress).
 * docs/design.md §2 "COLLECT". Included inside `control HotaggIngress`.
 *
 * A collect only reads, so a lost reply is simply asked again; iteration t's copy is
 * overwritten only by iteration t + 2.
 */
#ifndef HOTAGG_COLLECT_P4
#define HOTAGG_COLLECT_P4

// Entry I's key is a slot offset relative to the job's slot_base. Valid iff
// offset < slot_count and slot_base + offset < NUM_SLOTS (without wrap-around: the 64-bit
// offset and the base are each checked below NUM_SLOTS first). If the slot copy of this
// iteration was written in this iteration, the entry becomes (key, aggregated value).
// Invalid offsets and untouched copies leave the entry as it came, mask bit clear.
#define HOTAGG_COLLECT_ENTRY(I)                                                        \
    {                                                                                  \
        if (hdr.entries[I].isValid()) {                                                \
            if (hdr.entries[I].key < (bit<64>)job_slot_count &&                        \
                hdr.entries[I].key < (bit<64>)NUM_SLOTS &&                             \
                job_slot_base < NUM_SLOTS &&                                           \
                job_slot_base + hdr.entries[I].key[31:0] < NUM_SLOTS) {                \
                agg_index = ((hdr.hotagg.iteration & 1) << SLOT_BITS) |                \
                            ((job_slot_base + hdr.entries[I].key[31:0]) & SLOT_MASK);  \
                agg_iter.read(cell_iter, agg_index);                                   \
                if (cell_iter == hdr.hotagg.iteration) {                               \
                    agg_key.read(cell_key, agg_index);                                 \
                    agg_value.read(cell_value, agg_index);                             \
                    hdr.entries[I].key = cell_key;                                     \
                    hdr.entries[I].value = cell_value;                                 \
                    entry_mask = entry_mask | ((entry_mask_t)1 << I);                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

// Always answered by the switch that sees it.
#define HOTAGG_COLLECT_FINISH()                                                        \
    {                                                                                  \
        hdr.hotagg.mask = entry_mask;                                                  \
        HOTAGG_MAKE_REPLY(OP_COLLECT_REPLY);                                           \
    }

#endif  /* HOTAGG_COLLECT_P4 */
