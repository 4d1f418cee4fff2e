/*
 * hotagg: the job table (ingress step 5): which jobs the switch serves, and their slots.
 */
#ifndef HOTAGG_JOBS_P4
#define HOTAGG_JOBS_P4

control JobTable(in job_id_t job_id, out job_meta_t job) {

    // job_index: dense number 0..MAX_JOBS-1 for the dedup state; the job's slots are
    // [slot_base, slot_base + slot_count) of the NUM_SLOTS shared slots.
    @name(".HotaggIngress.set_job") @id(HOTAGG_ID_ACTION_SET_JOB)
    action set_job(job_index_t job_index, slot_t slot_base, slot_t slot_count) {
        job.found = true;
        job.index = job_index;
        job.slot_base = slot_base;
        job.slot_count = slot_count;
    }

    @name(".HotaggIngress.unknown_job") @id(HOTAGG_ID_ACTION_UNKNOWN_JOB)
    action unknown_job() {
        job.found = false;
        job.index = 0;
        job.slot_base = 0;
        job.slot_count = 0;
    }

    @name(".HotaggIngress.jobs") @id(HOTAGG_ID_TABLE_JOBS)
    table jobs {
        key = {
            job_id : exact @name("job_id");
        }
        actions = {
            set_job;
            @defaultonly unknown_job;
        }
        default_action = unknown_job();
        size = MAX_JOBS;
    }

    apply {
        jobs.apply();
    }
}

#endif  /* HOTAGG_JOBS_P4 */
