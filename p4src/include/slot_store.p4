/*
 * hotagg: the state of the NUM_SLOTS slots, shared by all jobs (docs/design.md §2, the
 * per-entry work of PUSH, PULL, COLLECT and WRITEBACK, and of FLUSH, §7).
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
 * thread, so a read-modify-write in one pass is not interleaved with another packet's.
 */
#ifndef HOTAGG_SLOT_STORE_P4
#define HOTAGG_SLOT_STORE_P4

// Takes hdr and meta whole: p4c passes those through, while a narrower argument (a
// header, a struct member, an argument of a nested control) is copied in and out at every
// call, which costs BMv2 an extra table per entry.
//
// Decisions are if-statements and every register access sits in a small action named by
// its effect: BMv2 evaluates a condition cheaply, while a "branch-free" action full of ?:
// made p4c inline each boolean into every use and doubled BMv2's instructions per packet
// (callgrind).
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

    // The current entry's slot copy (agg) and cache cell, as read.
    iteration_t copy_iter;
    hot_key_t copy_key;
    value_t copy_value;
    value_t copy_sum;           // copy_value + the entry's value (int32, two's complement)
    iteration_t cell_iter;
    hot_key_t cell_key;
    value_t cell_value;

    // ---- aggregation copies ----

    // COLLECT, FLUSH: the entry's slot state, located from the offset in its value (a hot
    // entry's is located by its hot-key lookup).
    @hidden
    action locate_from_value() {
        meta.entry.copy_index =
            agg_index(hdr.hotagg.iteration, meta.job.slot_base + meta.entry.value);
        meta.entry.cell_index = (meta.job.slot_base + meta.entry.value) & SLOT_MASK;
    }

    // meta.entry's slot state is located and its offset checked (slot_in_job) before any
    // of these actions.
    @hidden
    action read_copy() {
        agg_iter.read(copy_iter, meta.entry.copy_index);
        agg_key.read(copy_key, meta.entry.copy_index);
        agg_value.read(copy_value, meta.entry.copy_index);
        copy_sum = copy_value + meta.entry.value;
    }

    // A copy of another iteration: this entry claims it (lazy reset).
    @hidden
    action claim_copy() {
        agg_iter.write(meta.entry.copy_index, hdr.hotagg.iteration);
        agg_key.write(meta.entry.copy_index, meta.entry.key);
        agg_value.write(meta.entry.copy_index, meta.entry.value);
        meta.mask = meta.mask | meta.entry.position;
        stats.count(STAT_HOT_APPLIED);
    }

    @hidden
    action add_to_copy() {
        agg_value.write(meta.entry.copy_index, copy_sum);
        meta.mask = meta.mask | meta.entry.position;
        stats.count(STAT_HOT_APPLIED);
    }

    // COLLECT, FLUSH: the entry becomes the copy's (key, sum).
    @hidden
    action take_copy() {
        meta.entry.key = copy_key;
        meta.entry.value = copy_value;
        meta.mask = meta.mask | meta.entry.position;
    }

    // ---- cache cells ----

    @hidden
    action read_cell() {
        cache_iter.read(cell_iter, meta.entry.cell_index);
        cache_key.read(cell_key, meta.entry.cell_index);
        cache_value.read(cell_value, meta.entry.cell_index);
    }

    @hidden
    action serve_from_cell() {
        meta.entry.value = cell_value;
        meta.mask = meta.mask | meta.entry.position;
    }

    // The cell holds this key's value, valid for pulls of this iteration.
    @hidden
    action fill_cell() {
        cache_key.write(meta.entry.cell_index, meta.entry.key);
        cache_value.write(meta.entry.cell_index, meta.entry.value);
        cache_iter.write(meta.entry.cell_index, hdr.hotagg.iteration);
        meta.mask = meta.mask | meta.entry.position;
        stats.count(STAT_CACHE_WRITE);
    }

    @hidden
    action refresh_cell(value_t next_value) {
        cell_iter = hdr.hotagg.iteration + 1;
        cache_value.write(meta.entry.cell_index, next_value);
        cache_iter.write(meta.entry.cell_index, cell_iter);
        stats.count(STAT_CACHE_WRITE);
    }

    @hidden
    action invalidate_cell() {
        cache_iter.write(meta.entry.cell_index, 0);
    }

    apply {
        if (hdr.hotagg.op == OP_PUSH) {
            // A fresh push aggregates each hot entry into its slot's copy for this
            // iteration: it claims a copy of another iteration; adds to a copy of this key
            // unless the add overflows int32 (the PS then sums the entry in int64); and
            // leaves another key's copy alone (SLOT_CONFLICT). Every push (fresh or
            // duplicate) then sends the PS the entries its mask does not hold.
            // A copy of another iteration is claimed only by a push of t <= collected + 2:
            // every iteration that shared the copy before t is then read by the PS. A push
            // further ahead leaves it alone, the entry goes to the PS (SLOT_BUSY, §8).
            if (meta.push_fresh && meta.entry.hit) {
                if (slot_in_job(meta.job.slot_base, meta.job.slot_count, meta.entry.offset)) {
                    read_copy();
                    if (copy_iter != hdr.hotagg.iteration) {
                        if (hdr.hotagg.iteration > meta.collected + 2) {
                            stats.count(STAT_SLOT_BUSY);
                        } else {
                            claim_copy();
                        }
                    } else if (copy_key != meta.entry.key) {
                        stats.count(STAT_SLOT_CONFLICT);
                    } else if (copy_value[31:31] == meta.entry.value[31:31] &&
                               copy_sum[31:31] != copy_value[31:31]) {
                        // Signed overflow: both addends share a sign that the sum lacks.
                        stats.count(STAT_OVERFLOW);
                    } else {
                        add_to_copy();
                    }
                } else {
                    stats.count(STAT_BAD_SLOT);
                }
            }
            if ((meta.mask & meta.entry.position) == 0) {
                stats.count(STAT_COLD_FORWARDED);
            }
        } else if (hdr.hotagg.op == OP_COLLECT) {
            // The entry is (expected cached key, slot offset read as an unsigned value); an
            // offset outside the job leaves it as it came, no bit set, no stat.
            if (slot_in_job(meta.job.slot_base, meta.job.slot_count, meta.entry.value)) {
                locate_from_value();
                read_copy();
                bool touched = copy_iter == hdr.hotagg.iteration;
                // Request mask bit i asks, when the cell holds the expected key: with
                // INVALIDATE, to untag it (tag 0, never `cached`); else, if it is tagged
                // with this iteration, to move it on by the copy's sum for that key (0 if
                // untouched or another key), params(t+1) = params(t) - sum(t), and tag it
                // t + 1, unless the subtraction overflows int32. `cached` bit i is set iff
                // the tag is t + 1 afterwards, so a repeated COLLECT reports the same.
                if ((hdr.hotagg.mask & meta.entry.position) != 0) {
                    read_cell();
                    if (cell_key == meta.entry.key) {
                        if ((hdr.hotagg.flags & FLAG_INVALIDATE) != 0) {
                            invalidate_cell();
                        } else {
                            if (cell_iter == hdr.hotagg.iteration) {
                                value_t sum = 0;
                                if (touched && copy_key == meta.entry.key) {
                                    sum = copy_value;
                                }
                                value_t next_value = cell_value - sum;
                                // No int32 overflow: a, b share a sign, or a - b keeps a's.
                                if (cell_value[31:31] == sum[31:31] ||
                                    next_value[31:31] == cell_value[31:31]) {
                                    refresh_cell(next_value);
                                }
                            }
                            if (cell_iter == hdr.hotagg.iteration + 1) {
                                meta.cached = meta.cached | meta.entry.position;
                            }
                        }
                    }
                }
                if (touched) {
                    // A copy written in this iteration: the reply carries its key and sum.
                    take_copy();
                }
            }
        } else if (hdr.hotagg.op == OP_FLUSH) {
            // The entry is the slot offset (load_flush_batch); a copy written in this
            // iteration becomes the partial PUSH's entry, one outside the job nothing.
            if (slot_in_job(meta.job.slot_base, meta.job.slot_count, meta.entry.value)) {
                locate_from_value();
                read_copy();
                if (copy_iter == hdr.hotagg.iteration) {
                    take_copy();
                }
            }
        } else if (meta.entry.hit) {
            // PULL: a hit iff the cell holds this key for this iteration; the entry takes
            // the cached value. WRITEBACK: the cell is filled. An offset outside the job is
            // BAD_SLOT.
            if (slot_in_job(meta.job.slot_base, meta.job.slot_count, meta.entry.offset)) {
                if (hdr.hotagg.op == OP_PULL) {
                    read_cell();
                    if (cell_iter == hdr.hotagg.iteration && cell_key == meta.entry.key) {
                        serve_from_cell();
                    }
                } else {
                    fill_cell();
                }
            } else {
                stats.count(STAT_BAD_SLOT);
            }
        }
    }
}

// Per job: the newest iteration whose slot copies the PS has read whole (docs/design.md §8).
// A COLLECT or FLUSH of iteration t records t - 1 (the PS sends one only once every
// COLLECT of t - 1 was answered); a fresh PUSH reads it. Packet-level, not per entry: an
// empty COLLECT records it too. No tables, so it may be applied at two places.
// A FLUSH of t (`flush`) also records t as `flushed_iter` (§7): this switch's sums of t are
// leaving, so a fresh PUSH of t that reads it adds nothing here.
control CollectedIter(in bool record,
                      in bool flush,
                      in job_index_t job_index,
                      in iteration_t iteration,
                      out iteration_t collected,
                      out iteration_t flushed) {

    @name(".HotaggIngress.collected_iter") @id(HOTAGG_ID_REGISTER_COLLECTED_ITER)
    register<iteration_t>(MAX_JOBS) collected_iter;
    @name(".HotaggIngress.flushed_iter") @id(HOTAGG_ID_REGISTER_FLUSHED_ITER)
    register<iteration_t>(MAX_JOBS) flushed_iter;

    apply {
        reg_index_t cell = ((reg_index_t)job_index) & DEDUP_JOB_MASK;
        flushed = iteration;
        if (record) {
            collected = iteration - 1;
            if (iteration != 0) {
                collected_iter.write(cell, collected);
                if (flush) {
                    flushed_iter.write(cell, iteration);
                }
            }
        } else {
            collected_iter.read(collected, cell);
            flushed_iter.read(flushed, cell);
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
        HOTAGG_SKETCH_ENTRY                                                           \
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
