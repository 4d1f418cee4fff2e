/*
 * hotagg: the per-entry work of the switch ops (docs/design.md §2, the `for i` loops of
 * PUSH, PULL, COLLECT and WRITEBACK), written once and applied to each entry position.
 *
 * p4c has no loops and applies a table at most once per pass, so HotaggIngress walks the
 * positions with HOTAGG_PROCESS_ENTRY(I): hot-key table instance I (HotKeyLookup lookupI),
 * then EntryOps. EntryOps owns no table, so its one instance (and the one SlotStore and
 * ParamCache inside it, hence one copy of every register) serves all positions.
 */
#ifndef HOTAGG_ENTRY_OPS_P4
#define HOTAGG_ENTRY_OPS_P4

control EntryOps(in hotagg_t request,           // the request header as received
                 in entry_mask_t position,      // 1 << i for entry position i
                 inout local_metadata_t meta,   // job, lookup result, mask, cached, ...
                 inout entry_t entry)
                 (counter stats) {
    SlotStore(stats) slots;
    ParamCache(stats) cache;

    apply {
        bool done = false;
        hot_key_t cell_key;
        value_t cell_value;
        meta.entry.remove = false;
        if (request.op == OP_PUSH) {
            // A fresh push aggregates each hot entry; every push (fresh or duplicate) then
            // removes the entries its mask says the switch applied, and the PS gets the rest.
            if (meta.push_fresh && meta.entry.hit) {
                if (slot_in_job(meta.job.slot_base, meta.job.slot_count, meta.entry.offset)) {
                    slots.apply(SlotOp.ACCUMULATE, request.iteration,
                                meta.job.slot_base + meta.entry.offset, entry.key, entry.value,
                                done, cell_key, cell_value);
                    if (done) {
                        meta.mask = meta.mask | position;
                    }
                } else {
                    stats.count(STAT_BAD_SLOT);
                }
            }
            if ((meta.mask & position) != 0) {
                meta.entry.remove = true;
                meta.removed_count = meta.removed_count + 1;
            } else {
                stats.count(STAT_COLD_FORWARDED);
            }
        } else if (request.op == OP_COLLECT) {
            // The entry is (expected cached key, slot offset as an unsigned value); an offset
            // outside the job leaves it as it came, no bit set, no stat.
            if (slot_in_job(meta.job.slot_base, meta.job.slot_count, entry.value)) {
                slot_t slot = meta.job.slot_base + entry.value;
                slots.apply(SlotOp.READ, request.iteration, slot, entry.key, 0,
                            done, cell_key, cell_value);
                if ((request.mask & position) != 0) {
                    // Request mask bit i asks for a refresh (or INVALIDATE) of the cache.
                    value_t sum = (done && cell_key == entry.key) ? cell_value : 0;
                    value_t unused = 0;
                    bool cached;
                    cache.apply(CacheOp.REFRESH, request.iteration, slot, entry.key, unused,
                                sum, (request.flags & FLAG_INVALIDATE) != 0, cached);
                    if (cached) {
                        meta.cached = meta.cached | position;
                    }
                }
                if (done) {
                    // A copy written in this iteration: the reply carries (its key, its sum).
                    entry.key = cell_key;
                    entry.value = cell_value;
                    meta.mask = meta.mask | position;
                }
            }
        } else if (meta.entry.hit) {
            // PULL or WRITEBACK of a hot entry.
            if (slot_in_job(meta.job.slot_base, meta.job.slot_count, meta.entry.offset)) {
                cache.apply(request.op == OP_PULL ? CacheOp.SERVE : CacheOp.FILL,
                            request.iteration, meta.job.slot_base + meta.entry.offset,
                            entry.key, entry.value, 0, false, done);
                if (done) {
                    meta.mask = meta.mask | position;
                }
            } else {
                stats.count(STAT_BAD_SLOT);
            }
        }
    }
}

// Entry position I: look its key up in hot-key table instance I when the op asks for it,
// then the op's work on the entry; a PUSH entry the switch applied is not emitted.
#define HOTAGG_PROCESS_ENTRY(I)                                                       \
    if (hdr.entries[I].isValid()) {                                                   \
        if (meta.lookup_keys) {                                                       \
            lookup##I.apply(hdr.hotagg.job_id, hdr.entries[I].key,                    \
                            meta.entry.hit, meta.entry.offset);                       \
        }                                                                             \
        entry_ops.apply(hdr.hotagg, 8w1 << I, meta, hdr.entries[I]);                  \
        if (meta.entry.remove) {                                                      \
            hdr.entries[I].setInvalid();                                              \
        }                                                                             \
    }

#endif  /* HOTAGG_ENTRY_OPS_P4 */
