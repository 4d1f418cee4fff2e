/*
 * hotagg: COLLECT, the PS reads aggregated slots and refreshes the parameter cache
 * (fragment of HotaggIngress). docs/design.md §2 "COLLECT" is the normative pseudo-code;
 * the macros below follow it line by line. Included inside `control HotaggIngress`; the
 * macros expand in its apply block.
 *
 * The aggregates are only read, so a lost reply is simply asked again; iteration t's copy
 * is overwritten only by iteration t + 2. A refresh is repeatable too: once the cache is
 * tagged t + 1, a repeated COLLECT refreshes nothing and reports the same `cached` bit.
 */
#ifndef HOTAGG_COLLECT_P4
#define HOTAGG_COLLECT_P4

    // Scratch of the per-entry COLLECT logic (the agg registers are read into cell_iter,
    // cell_key and cell_value of registers.p4; those stay unchanged until the entry is
    // rewritten from them).
    slot_t collect_slot;            // slot_base + offset, masked into range
    bool collect_touched;           // the slot's copy was written in this iteration
    value_t collect_sum;            // the copy's sum for the expected key, else 0
    hot_key_t cache_cell_key;
    iteration_t cache_cell_iter;    // the cache tag, after a refresh if one was made
    value_t cache_cell_value;
    value_t cache_cell_next;        // cache_cell_value - collect_sum (int32, two's complement)
    iteration_t collect_next_iter;  // iteration + 1 (mod 2^32), the tag a refresh writes
    entry_mask_t cached_mask;       // the `cached` bitmap of the reply

// Before the entries: nothing cached yet; the tag a refresh writes.
#define HOTAGG_COLLECT_START()                                                         \
    {                                                                                  \
        cached_mask = 0;                                                               \
        collect_next_iter = hdr.hotagg.iteration + 1;                                  \
    }

// Entry I = (expected cached key, slot offset relative to the job's slot_base, read as an
// unsigned 32-bit number). Valid iff offset < slot_count and slot_base + offset < NUM_SLOTS,
// the sum taken without wrap-around (the offset and the base are each checked below
// NUM_SLOTS first); an invalid offset leaves the entry as it came, no bit set, no stat.
// Request mask bit I (hdr.hotagg.mask is overwritten only in HOTAGG_COLLECT_FINISH) asks,
// when the slot's cache holds the expected key: with FLAG_INVALIDATE, to untag it
// (cache_iter = 0, never a `cached` bit); else, if it is tagged with this iteration, to move
// it on by the copy's sum for that key (0 if untouched or another key) and tag it
// iteration + 1, unless the subtraction overflows int32. `cached` bit I is set iff the tag is
// iteration + 1 afterwards. Last, a copy written in this iteration turns the entry into
// (slot key, aggregated value), mask bit I. Every register is read at most once per entry.
#define HOTAGG_COLLECT_ENTRY(I)                                                        \
    {                                                                                  \
        if (hdr.entries[I].isValid()) {                                                \
            if (hdr.entries[I].value < job_slot_count &&                               \
                hdr.entries[I].value < NUM_SLOTS &&                                    \
                job_slot_base < NUM_SLOTS &&                                           \
                job_slot_base + hdr.entries[I].value < NUM_SLOTS) {                    \
                collect_slot = (job_slot_base + hdr.entries[I].value) & SLOT_MASK;     \
                agg_index = ((hdr.hotagg.iteration & 1) << SLOT_BITS) | collect_slot;  \
                agg_iter.read(cell_iter, agg_index);                                   \
                collect_touched = cell_iter == hdr.hotagg.iteration;                   \
                collect_sum = 0;                                                       \
                cell_key = 0;                                                          \
                cell_value = 0;                                                        \
                if (collect_touched) {                                                 \
                    agg_key.read(cell_key, agg_index);                                 \
                    agg_value.read(cell_value, agg_index);                             \
                    if (cell_key == hdr.entries[I].key) {                              \
                        collect_sum = cell_value;                                      \
                    }                                                                  \
                }                                                                      \
                if ((hdr.hotagg.mask & (8w1 << I)) != 0) {                 \
                    cache_key.read(cache_cell_key, collect_slot);                      \
                    if (cache_cell_key == hdr.entries[I].key) {                        \
                        if ((hdr.hotagg.flags & FLAG_INVALIDATE) != 0) {               \
                            cache_iter.write(collect_slot, (iteration_t)0);            \
                        } else {                                                       \
                            cache_iter.read(cache_cell_iter, collect_slot);            \
                            if (cache_cell_iter == hdr.hotagg.iteration) {             \
                                cache_value.read(cache_cell_value, collect_slot);      \
                                cache_cell_next = cache_cell_value - collect_sum;      \
                                /* no int32 overflow: a, b share a sign, or */         \
                                /* a - b keeps a's sign; else refused     */           \
                                if (cache_cell_value[31:31] == collect_sum[31:31] ||   \
                                    cache_cell_next[31:31] ==                          \
                                        cache_cell_value[31:31]) {                     \
                                    cache_value.write(collect_slot, cache_cell_next);  \
                                    cache_iter.write(collect_slot, collect_next_iter); \
                                    cache_cell_iter = collect_next_iter;               \
                                    stats.count(STAT_CACHE_WRITE);                     \
                                }                                                      \
                            }                                                          \
                            if (cache_cell_iter == collect_next_iter) {                \
                                cached_mask = cached_mask | (8w1 << I);    \
                            }                                                          \
                        }                                                              \
                    }                                                                  \
                }                                                                      \
                if (collect_touched) {                                                 \
                    hdr.entries[I].key = cell_key;                                     \
                    hdr.entries[I].value = cell_value;                                 \
                    entry_mask = entry_mask | (8w1 << I);                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

// header.mask = mask; header.cached = cached. Always answered by the switch that sees it.
#define HOTAGG_COLLECT_FINISH()                                                        \
    {                                                                                  \
        hdr.hotagg.mask = entry_mask;                                                  \
        hdr.hotagg.cached = cached_mask;                                               \
        HOTAGG_MAKE_REPLY(OP_COLLECT_REPLY);                                           \
    }

#endif  /* HOTAGG_COLLECT_P4 */
