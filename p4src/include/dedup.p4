/*
 * hotagg: exactly-once PUSH, the switch's half (docs/design.md §2 "PUSH", first and last
 * lines): per (job_index, worker_id, seq mod DEDUP_WINDOW), the last seq taken there and the
 * mask of entries the switch applied for it, re-sent on duplicates.
 *
 * Owns the dedup registers. @name(".HotaggIngress.<name>") keeps their P4Info names those
 * of docs/design.md §2 while they live here; HotaggIngress instantiates this control once.
 * The controller never reads them (BMv2 has no P4Runtime register access, p4lang/PI#376).
 */
#ifndef HOTAGG_DEDUP_P4
#define HOTAGG_DEDUP_P4

enum DedupVerdict {
    FRESH,          // a new seq: aggregate its entries, then record(...)
    DUPLICATE,      // seen at its cell: re-send the stored mask, add nothing
    STALE           // older than the seq at its cell: drop
}

// Dedup cell = (job_index & 15) << 14 | (worker_id & 255) << 6 | (seq & 63), < DEDUP_SIZE.
reg_index_t dedup_cell(in job_index_t job_index, in worker_id_t worker_id,
                       in seq_t seq) {
    return ((((reg_index_t)job_index) & DEDUP_JOB_MASK) << DEDUP_JOB_SHIFT) |
           ((((reg_index_t)worker_id) & DEDUP_WORKER_MASK) << DEDUP_WORKER_SHIFT) |
           (seq & DEDUP_SEQ_MASK);
}

// record == false: check seq at its cell (verdict; mask = the stored mask of a duplicate,
// else 0). record == true: remember that seq applied `mask`, so a duplicate re-acks and
// re-forwards exactly the same.
control Dedup(in bool record,
              in job_index_t job_index,
              in worker_id_t worker_id,
              in seq_t seq,
              inout entry_mask_t mask,
              out DedupVerdict verdict) {

    @name(".HotaggIngress.dedup_seq") @id(HOTAGG_ID_REGISTER_DEDUP_SEQ)
    register<seq_t>(DEDUP_SIZE) dedup_seq;
    @name(".HotaggIngress.dedup_mask") @id(HOTAGG_ID_REGISTER_DEDUP_MASK)
    register<entry_mask_t>(DEDUP_SIZE) dedup_mask;

    @hidden
    action record_seq(reg_index_t cell) {
        dedup_seq.write(cell, seq);
        dedup_mask.write(cell, mask);
    }

    apply {
        reg_index_t cell = dedup_cell(job_index, worker_id, seq);
        verdict = DedupVerdict.FRESH;
        if (record) {
            record_seq(cell);
        } else {
            seq_t last_seq;
            dedup_seq.read(last_seq, cell);
            if (last_seq == seq) {
                verdict = DedupVerdict.DUPLICATE;
                dedup_mask.read(mask, cell);
            } else if (last_seq > seq) {
                verdict = DedupVerdict.STALE;
            } else {
                mask = 0;
            }
        }
    }
}

#endif  /* HOTAGG_DEDUP_P4 */
