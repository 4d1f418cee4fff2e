"""Job lookup (the `jobs` table): job_id -> (job_index, slot_base, slot_count).

The lookup itself is inlined in ingress.process: the record for job_id, else the default
action's, and the job is known if that action is set_job (so a default action set to
set_job serves unknown ids too).
"""

from contract.names import ACTION_SET_JOB as SET_JOB  # noqa: F401 (ingress imports it here)
