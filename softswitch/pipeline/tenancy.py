"""The Admission control (p4src/include/tenancy.p4): is a request of a known job from where
the controller said that job's worker or PS is?

COLLECT and WRITEBACK look up `ps_admission` (job_id, ingress_port, src_addr); every other op
`worker_admission` (job_id, worker_id, ingress_port, src_addr). As in P4, the action that runs
decides: an entry's (always admit) or else the table's default (refuse, unless a controller
set it to admit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.names import ACTION_ADMIT as ADMIT

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline


def admitted(
    p: Pipeline, ps_op: bool, job_id: int, worker_id: int, ingress_port: int, src_addr: int
) -> bool:
    if ps_op:
        t = p.t_ps_admission
        rec = t._entries.get((job_id, ingress_port, src_addr)) or t._default_rec
    else:
        t = p.t_worker_admission
        rec = t._entries.get((job_id, worker_id, ingress_port, src_addr)) or t._default_rec
    return rec[0] == ADMIT
