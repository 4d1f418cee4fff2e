"""`make run JOBS=J`: several training jobs on one switch, each with its own workers, PS and
workload, sharing the switch's HOT_SLOTS (docs/design.md section 9, docs/experiment.md
"Several jobs").

The phases run every job at once: the warm-up (whose update counts give each job's
candidates), server-only, then offload with the slots split as SPLIT says. With
SPLIT=savings a second offload phase, `offload-equal`, gives each job HOT_SLOTS // J slots,
so that the split is measured against equal halves on the same machine, links and workloads.
Each job gets its own report in runs/<id>/job<j>/ (its server-only against its offload,
with its own bound); the run's report.md, summary.json and jobs.png compare the jobs and
the splits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.hotset import HotSet, JobDemand, equal_split, split_slots
from experiment import hotset, report
from experiment.config import (
    PER_JOB_OPTIONS,
    PreflightError,
    RunConfig,
    Split,
    measured_stream_offset,
    say,
    warmup_stream_offset,
)
from experiment.jobs_summary import (
    JOBS_FIGURE,
    JobOutcome,
    build_jobs_summary,
    jobs_markdown,
    jobs_plot,
    jobs_table,
)
from experiment.procedure import (
    bound,
    calibrate,
    record_link_rates,
    record_network,
    warmup_counts,
    warmup_summary,
    write_config,
)
from experiment.results import PhaseResult
from experiment.runner import Experiment, preflight
from experiment.schema import ModelBound, Summary
from experiment.summary import build_summary
from experiment.testbed import JobHosts, Testbed
from hosts.stats import dumps_strict

# The offload phase of each split, as the run's folders and the summary name them.
SPLIT_PHASES = {Split.SAVINGS: "offload", Split.EQUAL: "offload-equal"}


def splits_measured(cfg: RunConfig) -> list[Split]:
    """SPLIT=savings is measured beside equal halves, its baseline; SPLIT=equal alone."""
    return [Split.SAVINGS, Split.EQUAL] if cfg.split == Split.SAVINGS else [Split.EQUAL]


def choose_splits(
    bed: Testbed, warmup: list[PhaseResult], cfg: RunConfig
) -> dict[Split, dict[int, HotSet]]:
    """Each measured split's hot set per job, from the jobs' warm-up counts: keys updated
    less than once per warm-up iteration stay on the PS, as in a one-job run."""
    demands = {}
    for job, phase in zip(bed.jobs, warmup):
        demands[job.job_id] = JobDemand(warmup_counts(phase), cfg.warmup)
    choosers = {Split.SAVINGS: split_slots, Split.EQUAL: equal_split}
    return {split: choosers[split](demands, cfg.hot_slots) for split in splits_measured(cfg)}


def job_bound(
    job: JobHosts, bed: Testbed, config: dict[str, Any], hot: HotSet
) -> ModelBound | None:
    """The job's bound (experiment/model.py) on its own hosts' view of the shared switch:
    its links, at the rates they ran at; None where a link has no rate."""
    hosts = [h.name for h in (*job.workers, *job.parameter_servers)]
    return bound(job.cfg, config, hot.keys, hot.coverage, bed.topology.with_hosts_only(hosts))


def job_config(job: JobHosts, run_config: dict[str, Any]) -> dict[str, Any]:
    """The job's config.json: the run's (links, target, ports) with the job's own options."""
    own = job.cfg.as_dict()
    keep = (*PER_JOB_OPTIONS, "job_id")
    return {**run_config, **{k: own[k] for k in keep}, "jobs": 1, "per_job": {}}


def run(cfg: RunConfig) -> int:
    """A JOBS=J run; 0 when every job's parameters are equal in every mode, 1 otherwise."""
    if cfg.jobs < 2:
        raise PreflightError(f"JOBS={cfg.jobs}: this procedure runs two jobs or more")
    exp = Experiment(cfg, preflight(cfg))
    bed = exp.bed
    run_dir = exp.make_run_dir()
    config = cfg.as_dict()
    config.update(bed.target.record())
    record_link_rates(exp, config, calibrating=cfg.bw == "auto")
    for job in bed.jobs:
        c = job.cfg
        hosts = f"{job.workers[0].name}..{job.workers[-1].name}"
        say(
            f"job {job.job_id}: {c.workers} workers ({hosts}), PS on "
            f"{job.parameter_servers[0].name}, {c.workload} skew {c.skew:g}, seed {c.seed}"
        )
    try:
        exp.start()
        record_network(exp, config)
        none: dict[int, list[int] | None] = {job.job_id: None for job in bed.jobs}
        bed.configure_jobs(none)
        offset = warmup_stream_offset(cfg)
        measured = measured_stream_offset(cfg)
        warmup = exp.run_jobs_phase("warmup", cfg.warmup, False, stream_offset=offset)
        exp.initial_rto = max(exp.learn_initial_rto(phase) for phase in warmup)
        config["initial_rto_ms"] = round(1e3 * exp.initial_rto, 1)
        splits = choose_splits(bed, warmup, cfg)
        config["slots"] = {
            str(split): {str(j): len(h.keys) for j, h in hot.items()}
            for split, hot in splits.items()
        }
        write_config(run_dir, config)
        for split, hot in splits.items():
            for job_id, h in hot.items():
                say(f"{split} split: job {job_id}: {h.describe()}")
        first = splits[splits_measured(cfg)[0]]
        if cfg.bw == "auto":
            config["bw_auto"] = calibrate(exp, {j: h.keys for j, h in first.items()}, offset)
            record_link_rates(exp, config, calibrating=False)
        bed.configure_jobs(none)
        server = exp.run_jobs_phase(
            "server", cfg.iterations, collect=False, stream_offset=measured, drift=True
        )
        offload: dict[Split, list[PhaseResult]] = {}
        for split, hot in splits.items():
            bed.configure_jobs({j: h.keys for j, h in hot.items()})
            offload[split] = exp.run_jobs_phase(
                SPLIT_PHASES[split],
                cfg.iterations,
                collect=True,
                stream_offset=measured,
                drift=True,
            )
        outcomes = job_outcomes(run_dir, bed, config, warmup, server, offload, splits)
        jobs = build_jobs_summary(config, outcomes)
        (run_dir / "summary.json").write_text(dumps_strict(jobs, indent=2) + "\n")
        # matplotlib takes seconds to import: only a run that draws its figures pays for it
        jobs_plot(run_dir / JOBS_FIGURE, jobs)
        lines = [f"# Run {run_dir.name}", "", *jobs_markdown(jobs)]
        own = ", ".join(f"job{o.job_id}/report.md" for o in outcomes)
        lines += ["", f"Each job's own report (its server-only against its offload): {own}"]
        (run_dir / "report.md").write_text("\n".join(lines) + "\n")
        print(jobs_table(jobs), flush=True)
        say(f"report in {run_dir / 'report.md'} (runs/latest), each job's in job<id>/")
    finally:
        exp.stop()
    if not jobs["exact"]:
        say("ERROR: a job's parameters differ between modes; see summary.json")
        return 1
    return 0


def job_outcomes(
    run_dir: Path,
    bed: Testbed,
    config: dict[str, Any],
    warmup: list[PhaseResult],
    server: list[PhaseResult],
    offload: dict[Split, list[PhaseResult]],
    splits: dict[Split, dict[int, HotSet]],
) -> list[JobOutcome]:
    """Per job, a Summary of its server-only phase against each split's offload phase, and
    its own report (the first split's) in `run_dir`/job<j>/."""
    [agg] = [n for n, s in bed.topology.switches.items() if s.aggregate]
    outcomes = []
    for j, job in enumerate(bed.jobs):
        jconfig = job_config(job, config)
        summaries: dict[str, Summary] = {}
        for split, phases in offload.items():
            hot = splits[split][job.job_id]
            modes = {"warmup": warmup[j], "server": server[j], "offload": phases[j]}
            summaries[str(split)] = build_summary(
                jconfig,
                modes,
                warmup_summary(hot),
                job.cfg.workers,
                1,
                [agg],
                model=job_bound(job, bed, jconfig, hot),
                offload_hot_set=hotset.summarize(
                    job.cfg, jconfig, phases[j], max(1, len(hot.keys))
                ),
                shared_switch=True,
            )
            if len(summaries) == 1:  # the job's own report: its first split's
                jdir = run_dir / f"job{job.job_id}"
                jdir.mkdir(exist_ok=True)
                report.write_outputs(jdir, summaries[str(split)], modes, job.cfg.workers)
        outcomes.append(
            JobOutcome(
                job_id=job.job_id,
                ps_host=job.parameter_servers[0].name,
                switch=agg,
                config=jconfig,
                slots={str(s): len(splits[s][job.job_id].keys) for s in splits},
                summaries=summaries,
            )
        )
    return outcomes
