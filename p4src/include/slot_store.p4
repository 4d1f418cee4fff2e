/*
 * hotagg: the aggregation slots (docs/design.md §2 "PUSH" and "COLLECT").
 *
 * NUM_SLOTS slots shared by all jobs, two copies each by iteration parity (SwitchML's
 * shadow copy): agg index = (iteration & 1) << SLOT_BITS | slot. Each copy is tagged with
 * the iteration and the key it holds; a copy holding another iteration is claimed by the
 * next contribution (a lazy reset), so collecting never clears anything.
 *
 * Owns the agg registers (P4Info names kept by @name(".HotaggIngress.<name>")); instantiated
 * once (in EntryOps) and applied once per entry position. All cells start at 0. BMv2 runs
 * ingress in one thread, so a read-modify-write in one pass is not interleaved with another
 * packet's.
 */
#ifndef HOTAGG_SLOT_STORE_P4
#define HOTAGG_SLOT_STORE_P4

// A slot offset is usable by a job iff offset < slot_count and slot_base + offset <
// NUM_SLOTS, the sum taken without wrap-around (each term is checked below NUM_SLOTS first).
bool slot_in_job(in slot_t slot_base, in slot_t slot_count, in slot_t offset) {
    return offset < slot_count && offset < NUM_SLOTS && slot_base < NUM_SLOTS &&
           slot_base + offset < NUM_SLOTS;
}

enum SlotOp {
    ACCUMULATE,     // PUSH: add value for key into the slot's copy for iteration
    READ            // COLLECT: the copy's key and sum, if it holds iteration
}

control SlotStore(in SlotOp op,
                  in iteration_t iteration,
                  in slot_t slot,
                  in hot_key_t key,
                  in value_t value,
                  out bool done,              // ACCUMULATE: applied; READ: copy holds iteration
                  out hot_key_t cell_key,     // READ: the copy's key (0 unless done)
                  out value_t cell_value)     // READ: the copy's sum (0 unless done)
                  (counter stats) {

    @name(".HotaggIngress.agg_value") @id(HOTAGG_ID_REGISTER_AGG_VALUE)
    register<value_t>(AGG_SIZE) agg_value;
    @name(".HotaggIngress.agg_iter") @id(HOTAGG_ID_REGISTER_AGG_ITER)
    register<iteration_t>(AGG_SIZE) agg_iter;
    @name(".HotaggIngress.agg_key") @id(HOTAGG_ID_REGISTER_AGG_KEY)
    register<hot_key_t>(AGG_SIZE) agg_key;

    apply {
        reg_index_t index = ((iteration & 1) << SLOT_BITS) | (slot & SLOT_MASK);
        iteration_t held_iter;
        hot_key_t held_key;
        value_t held_value;
        agg_iter.read(held_iter, index);
        agg_key.read(held_key, index);
        agg_value.read(held_value, index);
        if (op == SlotOp.ACCUMULATE) {
            // Claim a copy of another iteration; add to one of this key; refuse an add that
            // would overflow int32 (the PS sums that entry in int64) and another key's copy.
            // One straight-line read-modify-write: a refused entry rewrites what it read.
            bool claim = held_iter != iteration;
            bool same_key = held_key == key;
            value_t sum = held_value + value;
            // Signed overflow: both addends share a sign that the sum lacks.
            bool overflow = held_value[31:31] == value[31:31] && sum[31:31] != held_value[31:31];
            done = claim || (same_key && !overflow);
            agg_iter.write(index, iteration);
            agg_key.write(index, claim ? key : held_key);
            agg_value.write(index, claim ? value : (done ? sum : held_value));
            stats.count(done ? STAT_HOT_APPLIED : (same_key ? STAT_OVERFLOW : STAT_SLOT_CONFLICT));
            cell_key = 0;
            cell_value = 0;
        } else {
            done = held_iter == iteration;
            cell_key = done ? held_key : 0;
            cell_value = done ? held_value : 0;
        }
    }
}

#endif  /* HOTAGG_SLOT_STORE_P4 */
