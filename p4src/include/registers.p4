/*
 * hotagg: switch state (fragment of HotaggIngress).
 *
 * Declared at HotaggIngress level so that all 8 entry positions share them; the
 * per-position logic (push.p4, pull.p4, collect.p4, writeback.p4) is therefore written
 * out once per position by macros. All cells start at 0. The controller never reads them
 * (BMv2's P4Runtime server has no register access, p4lang/PI#376). BMv2 allows several
 * reads and writes of one register per pass, and simple_switch runs ingress in a single
 * thread, so a read-modify-write in one pass is not interleaved with another packet's.
 * Indices are reg_index_t (bit<32>) and masked into range where they are computed.
 */
#ifndef HOTAGG_REGISTERS_P4
#define HOTAGG_REGISTERS_P4

    // Dedup, per (job_index, worker_id, seq mod DEDUP_WINDOW): the last seq taken there
    // and the mask of entries the switch applied for it (re-sent on duplicates).
    @id(HOTAGG_ID_REGISTER_DEDUP_SEQ)
    register<seq_t>(DEDUP_SIZE) dedup_seq;
    @id(HOTAGG_ID_REGISTER_DEDUP_MASK)
    register<entry_mask_t>(DEDUP_SIZE) dedup_mask;

    // Aggregation slots, two copies by iteration parity (index (iteration & 1) << SLOT_BITS
    // | slot), each tagged with the iteration and key it holds.
    @id(HOTAGG_ID_REGISTER_AGG_VALUE)
    register<value_t>(AGG_SIZE) agg_value;
    @id(HOTAGG_ID_REGISTER_AGG_ITER)
    register<iteration_t>(AGG_SIZE) agg_iter;
    @id(HOTAGG_ID_REGISTER_AGG_KEY)
    register<hot_key_t>(AGG_SIZE) agg_key;

    // Pull cache, one cell per slot: a parameter value valid for pulls of cache_iter, for
    // key cache_key.
    @id(HOTAGG_ID_REGISTER_CACHE_VALUE)
    register<value_t>(NUM_SLOTS) cache_value;
    @id(HOTAGG_ID_REGISTER_CACHE_ITER)
    register<iteration_t>(NUM_SLOTS) cache_iter;
    @id(HOTAGG_ID_REGISTER_CACHE_KEY)
    register<hot_key_t>(NUM_SLOTS) cache_key;

    // Scratch for the per-entry read-modify-writes.
    reg_index_t agg_index;
    iteration_t cell_iter;
    hot_key_t cell_key;
    value_t cell_value;
    value_t cell_sum;
    bool entry_applied;
    entry_mask_t entry_mask;    // the mask an op builds; written to hdr.hotagg.mask

#endif  /* HOTAGG_REGISTERS_P4 */
