/*
 * hotagg: PULL, answered from the parameter cache (fragment of HotaggIngress).
 * docs/design.md §2 "PULL". Included inside `control HotaggIngress`.
 */
#ifndef HOTAGG_PULL_P4
#define HOTAGG_PULL_P4

// Entry I is a cache hit iff its key is hot here (valid slot) and the slot's cache holds
// that key with a value valid for this iteration; the value is written into the entry.
#define HOTAGG_PULL_ENTRY(I)                                                           \
    {                                                                                  \
        if (slot_ok##I) {                                                              \
            cache_iter.read(cell_iter, slot##I & SLOT_MASK);                           \
            if (cell_iter == hdr.hotagg.iteration) {                                   \
                cache_key.read(cell_key, slot##I & SLOT_MASK);                         \
                if (cell_key == hdr.entries[I].key) {                                  \
                    cache_value.read(cell_value, slot##I & SLOT_MASK);                 \
                    hdr.entries[I].value = cell_value;                                 \
                    entry_mask = entry_mask | (8w1 << I);                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

// All-or-nothing: the switch answers only when every entry hit (and there is at least one);
// otherwise the pull goes on to the PS, hit entries carrying the cached values.
#define HOTAGG_PULL_FINISH()                                                           \
    {                                                                                  \
        hdr.hotagg.mask = entry_mask;                                                  \
        if (hdr.hotagg.count > 0 && entry_mask == present_mask) {                      \
            HOTAGG_MAKE_REPLY(OP_PULL_REPLY);                                          \
            stats.count(STAT_PULL_HIT);                                                \
        } else {                                                                       \
            stats.count(STAT_PULL_MISS);                                               \
        }                                                                              \
    }

#endif  /* HOTAGG_PULL_P4 */
