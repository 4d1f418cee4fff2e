/*
 * hotagg: WRITEBACK, the PS fills the parameter cache (fragment of HotaggIngress).
 * docs/design.md §2 "WRITEBACK". Included inside `control HotaggIngress`.
 */
#ifndef HOTAGG_WRITEBACK_P4
#define HOTAGG_WRITEBACK_P4

// Entry I is cached iff its key is hot here (valid slot): the slot's cache then holds this
// key's value, valid for pulls of this iteration.
#define HOTAGG_WRITEBACK_ENTRY(I)                                                      \
    {                                                                                  \
        if (slot_ok##I) {                                                              \
            cache_key.write(slot##I & SLOT_MASK, hdr.entries[I].key);                  \
            cache_value.write(slot##I & SLOT_MASK, hdr.entries[I].value);              \
            cache_iter.write(slot##I & SLOT_MASK, hdr.hotagg.iteration);               \
            entry_mask = entry_mask | (8w1 << I);                          \
            stats.count(STAT_CACHE_WRITE);                                             \
        }                                                                              \
    }

// Always answered by the switch that sees it.
#define HOTAGG_WRITEBACK_FINISH()                                                      \
    {                                                                                  \
        hdr.hotagg.mask = entry_mask;                                                  \
        HOTAGG_MAKE_REPLY(OP_WRITEBACK_ACK);                                           \
    }

#endif  /* HOTAGG_WRITEBACK_P4 */
