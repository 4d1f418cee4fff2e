/*
 * hotagg: the 8 hot-key lookups and their slot check (fragment of HotaggIngress).
 *
 * Included inside `control HotaggIngress`. One HotKeyLookup instance per entry position,
 * because p4c applies each table at most once per pass.
 */
#ifndef HOTAGG_LOOKUPS_P4
#define HOTAGG_LOOKUPS_P4

    HotKeyLookup() lookup0;
    HotKeyLookup() lookup1;
    HotKeyLookup() lookup2;
    HotKeyLookup() lookup3;
    HotKeyLookup() lookup4;
    HotKeyLookup() lookup5;
    HotKeyLookup() lookup6;
    HotKeyLookup() lookup7;

    // Per position i: hit_i/offset_i from lookup_i; slot_ok_i/slot_i once the offset is
    // checked against the job (docs/design.md §2, "Lookup of entry i").
    bool hit0;  slot_t offset0;  bool slot_ok0;  slot_t slot0;
    bool hit1;  slot_t offset1;  bool slot_ok1;  slot_t slot1;
    bool hit2;  slot_t offset2;  bool slot_ok2;  slot_t slot2;
    bool hit3;  slot_t offset3;  bool slot_ok3;  slot_t slot3;
    bool hit4;  slot_t offset4;  bool slot_ok4;  slot_t slot4;
    bool hit5;  slot_t offset5;  bool slot_ok5;  slot_t slot5;
    bool hit6;  slot_t offset6;  bool slot_ok6;  slot_t slot6;
    bool hit7;  slot_t offset7;  bool slot_ok7;  slot_t slot7;

    // Bitmap of the entries present in the packet as parsed: bit i set iff entries[i] is
    // valid, i.e. (1 << count) - 1 since the parser fills positions 0..count-1.
    entry_mask_t present_mask;

// Clear position I's lookup state and record whether entry I is present.
#define HOTAGG_ENTRY_RESET(I)                                                          \
    {                                                                                  \
        hit##I = false;                                                                \
        offset##I = 0;                                                                 \
        slot_ok##I = false;                                                            \
        slot##I = 0;                                                                   \
        if (hdr.entries[I].isValid()) {                                                \
            present_mask = present_mask | (8w1 << I);                      \
        }                                                                              \
    }

// A hit is usable iff offset < slot_count and slot_base + offset < NUM_SLOTS, the sum
// taken without wrap-around (each term is checked below NUM_SLOTS first). Otherwise the
// entry counts BAD_SLOT and is treated as a miss. The slot is masked into range anyway.
#define HOTAGG_CHECK_SLOT(I)                                                           \
    {                                                                                  \
        if (hit##I) {                                                                  \
            if (offset##I < job_slot_count && offset##I < NUM_SLOTS &&                 \
                job_slot_base < NUM_SLOTS &&                                           \
                job_slot_base + offset##I < NUM_SLOTS) {                               \
                slot_ok##I = true;                                                     \
                slot##I = (job_slot_base + offset##I) & SLOT_MASK;                     \
            } else {                                                                   \
                stats.count(STAT_BAD_SLOT);                                            \
            }                                                                          \
        }                                                                              \
    }

#endif  /* HOTAGG_LOOKUPS_P4 */
