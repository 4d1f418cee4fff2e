/*
 * hotagg: the state of the NUM_SLOTS slots, shared by all jobs (docs/design.md §2, the
 * per-entry work of PUSH, PULL, COLLECT and WRITEBACK).
 *
 * Each slot has two aggregation copies by iteration parity (SwitchML's shadow copy): agg
 * index = (iteration & 1) << SLOT_BITS | slot, each tagged with the iteration and the key
 * it holds; a copy holding another iteration is claimed by the next contribution (a lazy
 * reset), so collecting never clears anything. And one parameter cache cell that answers
 * pulls: a value valid for pulls of cache_iter, for key cache_key. COLLECT reads a copy and
 * refreshes the cell by its sum in one step, which is why one control owns both.
 *
 * Owns the agg and cache registers (P4Info names kept by @name(".HotaggIngress.<name>")).
 * HotaggIngress instantiates it once and applies it to each entry position in turn
 * (HOTAGG_PROCESS_ENTRY), on meta.entry. All cells start at 0. BMv2 runs ingress in one
 * thread, so a read-modify-write in one pass is not interleaved with another packet's; each
 * is one straight-line action (whatever it refuses, it rewrites as it read).
 */
#ifndef HOTAGG_SLOT_STORE_P4
#define HOTAGG_SLOT_STORE_P4

// A slot offset is usable by a job iff offset < slot_count and slot_base + offset <
// NUM_SLOTS, the sum taken without wrap-around (each term is checked below NUM_SLOTS first).
bool slot_in_job(in job_meta_t job, in slot_t offset) {
    return offset < job.slot_count && offset < NUM_SLOTS && job.slot_base < NUM_SLOTS &&
           job.slot_base + offset < NUM_SLOTS;
}

reg_index_t agg_index(in iteration_t iteration, in slot_t slot) {
    return ((iteration & 1) << SLOT_BITS) | (slot & SLOT_MASK);
}

// Takes hdr and meta whole: p4c passes those through, while a narrower argument (a
// header, a struct member, an argument of a nested control) is copied in and out at every
// call, which costs BMv2 an extra table per entry.
control SlotStore(inout headers_t hdr, inout local_metadata_t meta)(counter stats) {

    @name(".HotaggIngress.agg_value") @id(HOTAGG_ID_REGISTER_AGG_VALUE)
    register<value_t>(AGG_SIZE) agg_value;
    @name(".HotaggIngress.agg_iter") @id(HOTAGG_ID_REGISTER_AGG_ITER)
    register<iteration_t>(AGG_SIZE) agg_iter;
    @name(".HotaggIngress.agg_key") @id(HOTAGG_ID_REGISTER_AGG_KEY)
    register<hot_key_t>(AGG_SIZE) agg_key;

    @name(".HotaggIngress.cache_value") @id(HOTAGG_ID_REGISTER_CACHE_VALUE)
    register<value_t>(NUM_SLOTS) cache_value;
    @name(".HotaggIngress.cache_iter") @id(HOTAGG_ID_REGISTER_CACHE_ITER)
    register<iteration_t>(NUM_SLOTS) cache_iter;
    @name(".HotaggIngress.cache_key") @id(HOTAGG_ID_REGISTER_CACHE_KEY)
    register<hot_key_t>(NUM_SLOTS) cache_key;

    bool refreshed = false;

    // Aggregate the entry into its slot's copy for this iteration: claim a copy of another
    // iteration; add to a copy of this key unless the add overflows int32 (the PS then sums
    // the entry in int64); refuse another key's copy. An offset outside the job is BAD_SLOT.
    // One straight-line read-modify-write: whatever is refused rewrites what it read.
    @hidden
    action accumulate() {
        bool usable = slot_in_job(meta.job, meta.entry.offset);
        reg_index_t index = agg_index(hdr.hotagg.iteration, meta.job.slot_base + meta.entry.offset);
        iteration_t held_iter;
        hot_key_t held_key;
        value_t held_value;
        agg_iter.read(held_iter, index);
        agg_key.read(held_key, index);
        agg_value.read(held_value, index);
        bool claim = usable && held_iter != hdr.hotagg.iteration;
        bool same_key = held_key == meta.entry.key;
        value_t sum = held_value + meta.entry.value;
        // Signed overflow: both addends share a sign that the sum lacks.
        bool overflow = held_value[31:31] == meta.entry.value[31:31] &&
                        sum[31:31] != held_value[31:31];
        bool added = usable && !claim && same_key && !overflow;
        agg_iter.write(index, claim ? hdr.hotagg.iteration : held_iter);
        agg_key.write(index, claim ? meta.entry.key : held_key);
        agg_value.write(index, claim ? meta.entry.value : (added ? sum : held_value));
        meta.mask = meta.mask | ((claim || added) ? meta.entry.position : 0);
        stats.count(!usable ? STAT_BAD_SLOT :
                    ((claim || added) ? STAT_HOT_APPLIED :
                     (same_key ? STAT_OVERFLOW : STAT_SLOT_CONFLICT)));
    }

    // The slot's copy, if it holds this iteration (touched): its key and sum; else 0, 0.
    @hidden
    action read_copy() {
        reg_index_t index = agg_index(hdr.hotagg.iteration, meta.entry.slot);
        iteration_t held_iter;
        hot_key_t held_key;
        value_t held_value;
        agg_iter.read(held_iter, index);
        agg_key.read(held_key, index);
        agg_value.read(held_value, index);
        meta.entry.touched = held_iter == hdr.hotagg.iteration;
        meta.entry.held_key = meta.entry.touched ? held_key : 0;
        meta.entry.held_value = meta.entry.touched ? held_value : 0;
    }

    // A hit iff the cell holds this key for this iteration: the entry takes its value.
    @hidden
    action serve() {
        reg_index_t cell = meta.entry.slot & SLOT_MASK;
        iteration_t held_iter;
        hot_key_t held_key;
        value_t held_value;
        cache_iter.read(held_iter, cell);
        cache_key.read(held_key, cell);
        cache_value.read(held_value, cell);
        bool hit = held_iter == hdr.hotagg.iteration && held_key == meta.entry.key;
        meta.entry.value = hit ? held_value : meta.entry.value;
        meta.mask = meta.mask | (hit ? meta.entry.position : 0);
    }

    // The cell holds this key's value, valid for pulls of this iteration.
    @hidden
    action fill() {
        reg_index_t cell = meta.entry.slot & SLOT_MASK;
        cache_key.write(cell, meta.entry.key);
        cache_value.write(cell, meta.entry.value);
        cache_iter.write(cell, hdr.hotagg.iteration);
        meta.mask = meta.mask | meta.entry.position;
        stats.count(STAT_CACHE_WRITE);
    }

    // Only a cell that holds the expected key (meta.entry.key) is touched. INVALIDATE untags
    // it (tag 0, never `cached`); else a cell tagged with this iteration moves on by the
    // slot's sum for that key, params(t+1) = params(t) - sum(t), and is tagged t + 1, unless
    // the subtraction overflows int32. Repeatable: once tagged t + 1 it is not refreshed
    // again, and stays `cached`.
    @hidden
    action refresh_or_invalidate() {
        reg_index_t cell = meta.entry.slot & SLOT_MASK;
        iteration_t held_iter;
        hot_key_t held_key;
        value_t held_value;
        cache_iter.read(held_iter, cell);
        cache_key.read(held_key, cell);
        cache_value.read(held_value, cell);
        bool invalidate = (hdr.hotagg.flags & FLAG_INVALIDATE) != 0;
        value_t sum = (meta.entry.touched && meta.entry.held_key == meta.entry.key) ?
                      meta.entry.held_value : 0;
        iteration_t next_iter = hdr.hotagg.iteration + 1;
        value_t next_value = held_value - sum;
        // No int32 overflow: a, b share a sign, or a - b keeps a's sign.
        bool fits = held_value[31:31] == sum[31:31] || next_value[31:31] == held_value[31:31];
        bool match = held_key == meta.entry.key;
        refreshed = match && !invalidate && held_iter == hdr.hotagg.iteration && fits;
        iteration_t tag = (match && invalidate) ? 0 : (refreshed ? next_iter : held_iter);
        cache_iter.write(cell, tag);
        cache_value.write(cell, refreshed ? next_value : held_value);
        meta.cached = meta.cached |
                      ((match && !invalidate && tag == next_iter) ? meta.entry.position : 0);
    }

    apply {
        if (hdr.hotagg.op == OP_PUSH) {
            // A fresh push aggregates each hot entry. Every push (fresh or duplicate) then
            // sends the PS the entries its mask does not hold.
            if (meta.push_fresh && meta.entry.hit) {
                accumulate();
            }
            if ((meta.mask & meta.entry.position) == 0) {
                stats.count(STAT_COLD_FORWARDED);
            }
        } else if (hdr.hotagg.op == OP_COLLECT) {
            // The entry is (expected cached key, slot offset read as an unsigned value); an
            // offset outside the job leaves it as it came, no bit set, no stat. Request
            // mask bit i asks for a refresh (or with INVALIDATE, an untag) of the cell.
            if (slot_in_job(meta.job, meta.entry.value)) {
                meta.entry.slot = meta.job.slot_base + meta.entry.value;
                read_copy();
                if ((hdr.hotagg.mask & meta.entry.position) != 0) {
                    refresh_or_invalidate();
                    if (refreshed) {
                        stats.count(STAT_CACHE_WRITE);
                    }
                }
                if (meta.entry.touched) {
                    // A copy written in this iteration: the reply carries its key and sum.
                    meta.entry.key = meta.entry.held_key;
                    meta.entry.value = meta.entry.held_value;
                    meta.mask = meta.mask | meta.entry.position;
                }
            }
        } else if (meta.entry.hit) {
            // PULL or WRITEBACK of a hot entry; an offset outside the job is BAD_SLOT.
            if (slot_in_job(meta.job, meta.entry.offset)) {
                meta.entry.slot = meta.job.slot_base + meta.entry.offset;
                if (hdr.hotagg.op == OP_PULL) {
                    serve();
                } else {
                    fill();
                }
            } else {
                stats.count(STAT_BAD_SLOT);
            }
        }
    }
}

// Entry position I: into meta.entry; looked up in hot-key table instance I when the op
// asks for it; the op's work on the slot state; back into the packet if the op rewrites
// entries (PULL, COLLECT). The load is written in both branches so that BMv2 runs it in
// one action with the copy of the lookup key that p4c makes (a table key cannot name a
// header stack element), instead of one action more per entry.
#define HOTAGG_LOAD_ENTRY(I)                                                          \
    meta.entry.position = 8w1 << I;                                                   \
    meta.entry.key = hdr.entries[I].key;                                              \
    meta.entry.value = hdr.entries[I].value;

#define HOTAGG_PROCESS_ENTRY(I)                                                       \
    if (hdr.entries[I].isValid()) {                                                   \
        if (meta.lookup_keys) {                                                       \
            HOTAGG_LOAD_ENTRY(I)                                                      \
            lookup##I.apply(hdr, meta);                                               \
        } else {                                                                      \
            HOTAGG_LOAD_ENTRY(I)                                                      \
        }                                                                             \
        slots.apply(hdr, meta);                                                       \
        if (meta.rewrite) {                                                           \
            hdr.entries[I].key = meta.entry.key;                                      \
            hdr.entries[I].value = meta.entry.value;                                  \
        }                                                                             \
    }

// PUSH that goes on to the PS: entry I is removed if the switch applied it.
#define HOTAGG_REMOVE_IF_APPLIED(I)                                                   \
    if (hdr.entries[I].isValid() && (meta.mask & (8w1 << I)) != 0) {                  \
        hdr.entries[I].setInvalid();                                                  \
        meta.removed_count = meta.removed_count + 1;                                  \
    }

#endif  /* HOTAGG_SLOT_STORE_P4 */
