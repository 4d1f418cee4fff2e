/*
 * hotagg: the parameter cache that answers pulls (docs/design.md §2 "PULL", "WRITEBACK",
 * "COLLECT"): one cell per slot, a parameter value valid for pulls of cache_iter, for key
 * cache_key.
 *
 * Owns the cache registers (P4Info names kept by @name(".HotaggIngress.<name>"));
 * instantiated once (in EntryOps) and applied once per entry position.
 */
#ifndef HOTAGG_PARAM_CACHE_P4
#define HOTAGG_PARAM_CACHE_P4

enum CacheOp {
    SERVE,          // PULL: the value, if the cell holds key for iteration
    FILL,           // WRITEBACK: the cell holds key's value for iteration
    REFRESH         // COLLECT: move the cell on by the slot's sum, or untag it
}

control ParamCache(in CacheOp op,
                   in iteration_t iteration,
                   in slot_t slot,
                   in hot_key_t key,
                   inout value_t value,    // SERVE: out, the cached value; FILL: in
                   in value_t sum,         // REFRESH: the slot's sum for key, else 0
                   in bool invalidate,     // REFRESH: untag instead (FLAG_INVALIDATE)
                   out bool done)          // SERVE: hit; FILL: true; REFRESH: tagged t + 1
                   (counter stats) {

    @name(".HotaggIngress.cache_value") @id(HOTAGG_ID_REGISTER_CACHE_VALUE)
    register<value_t>(NUM_SLOTS) cache_value;
    @name(".HotaggIngress.cache_iter") @id(HOTAGG_ID_REGISTER_CACHE_ITER)
    register<iteration_t>(NUM_SLOTS) cache_iter;
    @name(".HotaggIngress.cache_key") @id(HOTAGG_ID_REGISTER_CACHE_KEY)
    register<hot_key_t>(NUM_SLOTS) cache_key;

    apply {
        reg_index_t cell = slot & SLOT_MASK;
        if (op == CacheOp.FILL) {
            cache_key.write(cell, key);
            cache_value.write(cell, value);
            cache_iter.write(cell, iteration);
            stats.count(STAT_CACHE_WRITE);
            done = true;
        } else {
            hot_key_t held_key;
            iteration_t held_iter;
            value_t held_value;
            cache_key.read(held_key, cell);
            cache_iter.read(held_iter, cell);
            cache_value.read(held_value, cell);
            if (op == CacheOp.SERVE) {
                done = held_iter == iteration && held_key == key;
                value = done ? held_value : value;
            } else {
                // REFRESH, asked for this entry. Only a cell that holds the expected key is
                // touched: INVALIDATE untags it (tag 0, never `cached`); else a cell tagged
                // with this iteration moves on by the sum, params(t+1) = params(t) - sum(t),
                // and is tagged t + 1, unless the subtraction overflows int32. Repeatable:
                // once tagged t + 1 it is not refreshed again and stays `cached`.
                iteration_t next_iter = iteration + 1;
                value_t next_value = held_value - sum;
                // No int32 overflow: a, b share a sign, or a - b keeps a's sign.
                bool fits = held_value[31:31] == sum[31:31] ||
                            next_value[31:31] == held_value[31:31];
                bool match = held_key == key;
                bool refresh = match && !invalidate && held_iter == iteration && fits;
                iteration_t tag = (match && invalidate) ? 0 : (refresh ? next_iter : held_iter);
                cache_iter.write(cell, tag);
                cache_value.write(cell, refresh ? next_value : held_value);
                if (refresh) {
                    stats.count(STAT_CACHE_WRITE);
                }
                done = match && !invalidate && tag == next_iter;
            }
        }
    }
}

#endif  /* HOTAGG_PARAM_CACHE_P4 */
