/*
 * hotagg: tenancy (ingress step 5b, docs/design.md §2 "Tenancy"). A request of a known job
 * is processed only when it arrives from where the controller said that job's host is: a
 * worker op (every op but COLLECT and WRITEBACK) from the (ingress port, IPv4 source) admitted
 * for its (job_id, worker_id), a COLLECT or WRITEBACK from one admitted as the job's PS.
 * Default deny: a job without entries is served to no one. Applied before any register is
 * read or written, so a forged request changes no dedup cell, sum or cache entry.
 * A reply a worker takes (PUSH_ACK, PULL_REPLY, DONE_ACK) passes only from where the job's
 * PS's traffic arrives (ps_admission), on every switch it crosses: the controller admits the
 * PS on each switch on its paths to the job's workers.
 */
#ifndef HOTAGG_TENANCY_P4
#define HOTAGG_TENANCY_P4

control Admission(in job_id_t job_id,
                  in worker_id_t worker_id,
                  in port_t ingress_port,
                  in ipv4_addr_t src_addr,
                  in bool ps_op,
                  out bool admitted) {

    // Shared by both tables. The default action decides for a (port, address) without an
    // entry: refuse, unless a controller sets the default to admit (tenancy off).
    @name(".HotaggIngress.admit") @id(HOTAGG_ID_ACTION_ADMIT)
    action admit() {
        admitted = true;
    }

    @name(".HotaggIngress.refuse") @id(HOTAGG_ID_ACTION_REFUSE)
    action refuse() {
        admitted = false;
    }

    // (job, worker) -> where its PUSH, PULL and DONE come from. A worker reached over
    // several ports (one per path) gets one entry per port.
    @name(".HotaggIngress.worker_admission") @id(HOTAGG_ID_TABLE_WORKER_ADMISSION)
    table worker_admission {
        key = {
            job_id       : exact @name("job_id");
            worker_id    : exact @name("worker_id");
            ingress_port : exact @name("ingress_port");
            src_addr     : exact @name("src_addr");
        }
        actions = {
            admit;
            @defaultonly refuse;
        }
        default_action = refuse();
        size = WORKER_ADMISSION_SIZE;
    }

    // Where a job's COLLECT and WRITEBACK, and the replies to its workers, come from: its PS
    // host(s), one entry per shard and port its traffic arrives on.
    @name(".HotaggIngress.ps_admission") @id(HOTAGG_ID_TABLE_PS_ADMISSION)
    table ps_admission {
        key = {
            job_id       : exact @name("job_id");
            ingress_port : exact @name("ingress_port");
            src_addr     : exact @name("src_addr");
        }
        actions = {
            admit;
            @defaultonly refuse;
        }
        default_action = refuse();
        size = PS_ADMISSION_SIZE;
    }

    apply {
        admitted = false;
        if (ps_op) {
            ps_admission.apply();
        } else {
            worker_admission.apply();
        }
    }
}

#endif  /* HOTAGG_TENANCY_P4 */
