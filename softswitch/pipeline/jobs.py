"""Job lookup (the `jobs` table): job_id -> (job_index, slot_base, slot_count)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.names import ACTION_SET_JOB as SET_JOB

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline


def lookup_job(p: Pipeline, job_id: int) -> tuple[int, ...] | None:
    """The set_job parameters for `job_id`, or None when `unknown_job` runs.

    The action that runs decides, so a default action set to set_job serves unknown ids too.
    """
    t = p.t_jobs
    rec = t._entries.get(job_id)
    if rec is None:
        rec = t._default_rec
    return rec[1] if rec[0] == SET_JOB else None
