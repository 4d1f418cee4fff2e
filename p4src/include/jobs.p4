/*
 * hotagg: request checks and the job table (fragment of HotaggIngress).
 *
 * Included inside `control HotaggIngress` (P4Info names HotaggIngress.jobs, ...); the
 * macros expand in its apply block.
 */
#ifndef HOTAGG_JOBS_P4
#define HOTAGG_JOBS_P4

    // The job of the current request, written by set_job.
    bool job_found;
    job_index_t job_idx;
    slot_t job_slot_base;
    slot_t job_slot_count;

    // job_index: dense number 0..MAX_JOBS-1 for the dedup state; the job's slots are
    // [slot_base, slot_base + slot_count) of the NUM_SLOTS shared slots.
    @id(HOTAGG_ID_ACTION_SET_JOB)
    action set_job(job_index_t job_index, slot_t slot_base, slot_t slot_count) {
        job_found = true;
        job_idx = job_index;
        job_slot_base = slot_base;
        job_slot_count = slot_count;
    }

    @id(HOTAGG_ID_ACTION_UNKNOWN_JOB)
    action unknown_job() {
        job_found = false;
    }

    @id(HOTAGG_ID_TABLE_JOBS)
    table jobs {
        key = {
            hdr.hotagg.job_id : exact @name("job_id");
        }
        actions = {
            set_job;
            @defaultonly unknown_job;
        }
        default_action = unknown_job();
        size = MAX_JOBS;
    }

// Ingress step 4 and the op check of step 5, in the order of docs/design.md: MALFORMED
// (parser error, version, UDP length), then UNKNOWN_OP. The job check follows jobs.apply().
#define HOTAGG_CHECK_REQUEST()                                                         \
    {                                                                                  \
        if (standard_metadata.parser_error != error.NoError ||                         \
            !hdr.hotagg.isValid() ||                                                   \
            hdr.hotagg.version != HOTAGG_VERSION ||                                    \
            hdr.udp.length != UDP_HEADER_LEN + HEADER_LEN +                            \
                              ((bit<16>)hdr.hotagg.count) * ENTRY_LEN) {               \
            HOTAGG_DROP(STAT_MALFORMED);                                               \
        } else if (hdr.hotagg.op == 0 || hdr.hotagg.op > OP_MAX) {                     \
            HOTAGG_DROP(STAT_UNKNOWN_OP);                                              \
        }                                                                              \
    }

#define HOTAGG_CHECK_JOB()                                                             \
    {                                                                                  \
        if (!job_found) {                                                              \
            HOTAGG_DROP(STAT_UNKNOWN_JOB);                                             \
        }                                                                              \
    }

#endif  /* HOTAGG_JOBS_P4 */
