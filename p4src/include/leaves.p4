/*
 * hotagg: aggregation at every leaf (docs/design.md §7, design C). Each aggregating switch
 * has a service address (the address the PS sends its COLLECT, WRITEBACK and FLUSH to); the
 * PS's own leaf (the root) counts the partial PUSHes it absorbed per (job, iteration); a
 * chained WRITEBACK goes from leaf to leaf.
 *
 * - service_address (keyless, default 0): once set, the switch answers PS ops only when
 *   they are addressed to it and routes the others on unchecked (ingress step 5a), and it
 *   absorbs partial PUSHes (FROM_SWITCH) instead of routing them on (step 6).
 * - chain_next (keyless, default 0): where a chained WRITEBACK goes after this switch
 *   cached it; 0 = the last leaf, which acks it.
 * - flush_count / flush_iter: per (job_index, iteration parity), the partial PUSHes absorbed
 *   whole in that iteration, tagged with it (a lazy reset, as the slot copies); COLLECT
 *   replies carry the count in aux.
 */
#ifndef HOTAGG_LEAVES_P4
#define HOTAGG_LEAVES_P4

// Step 5a: the service address of this switch, read only for the ops that need it (PS ops
// and partial PUSHes), and whether a PS op is for another switch. Takes hdr and meta whole (p4c copies narrower arguments at every call).
control ServiceAddress(in headers_t hdr, inout local_metadata_t meta) {

    @name(".HotaggIngress.set_service_address") @id(HOTAGG_ID_ACTION_SET_SERVICE_ADDRESS)
    action set_service_address(ipv4_addr_t addr) {
        meta.service_addr = addr;
    }

    // Keyless: the controller sets the address by modifying the default action.
    @name(".HotaggIngress.service_address") @id(HOTAGG_ID_TABLE_SERVICE_ADDRESS)
    table service_address {
        actions = {
            set_service_address;
        }
        default_action = set_service_address(0);
        size = 1;
    }

    // Applied to requests other than a worker's PUSH (HotaggIngress checks that much).
    apply {
        bool ps_op = hdr.hotagg.op == OP_COLLECT || hdr.hotagg.op == OP_WRITEBACK ||
                     hdr.hotagg.op == OP_FLUSH;
        if (ps_op || hdr.hotagg.op == OP_PUSH) {
            service_address.apply();
            if (ps_op && meta.service_addr != 0 && hdr.ipv4.dstAddr != meta.service_addr) {
                meta.transit = true;
            }
        }
    }
}

// A chained WRITEBACK at its addressee: the next leaf's service address, 0 for the last.
control ChainNext(inout local_metadata_t meta) {

    @name(".HotaggIngress.set_chain_next") @id(HOTAGG_ID_ACTION_SET_CHAIN_NEXT)
    action set_chain_next(ipv4_addr_t addr) {
        meta.chain_next = addr;
    }

    @name(".HotaggIngress.chain_next") @id(HOTAGG_ID_TABLE_CHAIN_NEXT)
    table chain_next {
        actions = {
            set_chain_next;
        }
        default_action = set_chain_next(0);
        size = 1;
    }

    apply {
        chain_next.apply();
    }
}

// Cell of (job_index, iteration parity) = (job_index & 15) << 1 | (iteration & 1).
reg_index_t flush_cell(in job_index_t job_index, in iteration_t iteration) {
    return ((((reg_index_t)job_index) & DEDUP_JOB_MASK) << 1) | (iteration & 1);
}

// absorb == true: one more partial PUSH of (job, iteration) was absorbed whole. Either way,
// `count` is the cell's count for this iteration (0 if it is tagged with another one).
// No tables, so it may be applied at two places (PUSH and COLLECT).
control FlushCount(in bool absorb,
                   in job_index_t job_index,
                   in iteration_t iteration,
                   out flush_count_t count) {

    @name(".HotaggIngress.flush_count") @id(HOTAGG_ID_REGISTER_FLUSH_COUNT)
    register<flush_count_t>(FLUSH_COUNT_SIZE) flush_count;
    @name(".HotaggIngress.flush_iter") @id(HOTAGG_ID_REGISTER_FLUSH_ITER)
    register<iteration_t>(FLUSH_COUNT_SIZE) flush_iter;

    @hidden
    action record_count(reg_index_t cell) {
        flush_iter.write(cell, iteration);
        flush_count.write(cell, count);
    }

    apply {
        reg_index_t cell = flush_cell(job_index, iteration);
        iteration_t tag;
        flush_iter.read(tag, cell);
        flush_count.read(count, cell);
        if (tag != iteration) {
            count = 0;      // the cell holds another iteration's count: a lazy reset
        }
        if (absorb) {
            count = count + 1;
            record_count(cell);
        }
    }
}

// FLUSH, entry position I (docs/design.md §7): made valid with (key 0, slot offset first +
// I), inside HotaggIngress's load_flush_batch action (`first` = aux << 3). SlotStore then
// turns a position whose copy was written in this iteration into (key, sum) and sets its
// mask bit.
#define HOTAGG_LOAD_OFFSET(I)                                                         \
    hdr.entries[I].setValid();                                                        \
    hdr.entries[I].key = 0;                                                           \
    hdr.entries[I].value = first + I;

// After the positions: an untouched one is removed (removed_count counts them).
#define HOTAGG_KEEP_IF_TOUCHED(I)                                                     \
    if ((meta.mask & (8w1 << I)) == 0) {                                              \
        hdr.entries[I].setInvalid();                                                  \
        meta.removed_count = meta.removed_count + 1;                                  \
    }

#endif  /* HOTAGG_LEAVES_P4 */
