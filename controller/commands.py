"""The CLI's commands: each takes a Session and returns (data for --json, text for humans)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.constants import DROP_SCALE
from controller.client import SwitchClient
from controller.drop_sim import DropSim
from controller.errors import BadInput, NotFound, PipelineMismatch
from controller.forwarding import Forwarding, compute_routes, load_routes_topology
from controller.hot_keys import HotKeys
from controller.hotset import choose, combine, load_stats
from controller.jobs import Jobs
from controller.leaves import AddressTable, ChainNext, ServiceAddress
from controller.online.estimators import ChangeRateEstimator, RateEstimator
from controller.online.loop import OnlineController
from controller.online.observation import RateSource
from controller.online.policy import Hysteresis
from controller.online.sources import CombinedSource, PSFrequencySource, SwitchHitsSource
from controller.online.switch_target import SwitchTarget
from controller.p4info import P4Info
from controller.sketch import Sketch, SketchSource
from controller.stats import Stats
from controller.tenancy import Admission, Tenancy, admission, admissions_from_topology

Output = tuple[Any, str]


class Session:
    """What one CLI invocation needs: a client connected on first use, and the P4Info."""

    def __init__(self, args: argparse.Namespace, default_p4info: Path) -> None:
        self.args = args
        self.default_p4info = default_p4info
        self._client: SwitchClient | None = None
        self._p4info: P4Info | None = None

    @property
    def client(self) -> SwitchClient:
        if self._client is None:
            a = self.args
            self._client = SwitchClient(
                a.grpc_addr, a.device_id, a.election_id, timeout=a.timeout, wait=a.wait
            ).connect()
        return self._client

    def p4info_file(self) -> Path | None:
        if self.args.p4info is not None:
            return self.args.p4info
        return self.default_p4info if self.default_p4info.exists() else None

    def p4info(self) -> P4Info:
        """Our P4Info, checked against the switch's (so names map to the switch's ids)."""
        if self._p4info is None:
            switch = P4Info(self.client.get_pipeline())
            path = self.p4info_file()
            if path is None:
                self._p4info = switch
            else:
                mine = P4Info.from_file(path)
                problems = mine.mismatches(switch)
                if problems:
                    raise PipelineMismatch(
                        f"the switch's pipeline does not fit {path}: {problems[0]}"
                        + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
                        + "; push it with 'pipeline push'"
                    )
                self._p4info = mine
        return self._p4info

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def run(args: argparse.Namespace, default_p4info: Path) -> int:
    session = Session(args, default_p4info)
    try:
        data, text = args.func(session)
    finally:
        session.close()
    print(json.dumps(data, indent=1, sort_keys=True) if args.json else text)
    return 0


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


# --- pipeline ---


def pipeline_push(s: Session) -> Output:
    path = s.p4info_file()
    if path is None:
        raise BadInput("no P4Info: give --p4info FILE")
    p4 = P4Info.from_file(path)
    config = b""
    if s.args.bmv2_json is not None:
        try:
            config = s.args.bmv2_json.read_bytes()
        except OSError as e:
            raise BadInput(f"cannot read {s.args.bmv2_json}: {e.strerror}") from None
    s.client.set_pipeline(p4.message, config)
    data = {"p4info": str(path), "tables": len(p4.message.tables), "device_config": len(config)}
    return data, f"pipeline pushed to {s.args.grpc_addr}: {path} ({len(config)} bytes of config)"


def pipeline_show(s: Session) -> Output:
    switch = P4Info(s.client.get_pipeline())
    path = s.p4info_file()
    problems = P4Info.from_file(path).mismatches(switch) if path else []
    tables = [
        {"name": t.preamble.name, "id": t.preamble.id, "size": t.size}
        for t in switch.message.tables
    ]
    text = table(["table", "id", "size"], [(t["name"], hex(t["id"]), t["size"]) for t in tables])
    text += "\n" + ("\n".join(problems) if problems else f"fits {path}" if path else "")
    return {"tables": tables, "mismatches": problems}, text


# --- forwarding ---


def forwarding_install(s: Session) -> Output:
    routes = compute_routes(load_routes_topology(s.args.topo), s.args.switch)
    data: dict[str, Any] = {"switch": s.args.switch, "routes": [str(r) for r in routes]}
    text = "\n".join(str(r) for r in routes)
    if not s.args.dry_run:
        result = Forwarding(s.client, s.p4info()).install(routes, s.args.replace)
        data.update(result)
        text += (
            "\n"
            + f"{s.args.switch}: {len(routes)} routes "
            + (
                f"({result['inserted']} inserted, {result['modified']} modified, "
                f"{result['deleted']} deleted)"
            )
        )
    return data, text


def forwarding_list(s: Session) -> Output:
    routes = Forwarding(s.client, s.p4info()).routes()
    return [str(r) for r in routes], "\n".join(str(r) for r in routes) or "no routes"


# --- jobs ---


def job_add(s: Session) -> Output:
    job = Jobs(s.client, s.p4info()).add(s.args.job_id, s.args.slots, s.args.slot_base)
    return job.as_dict(), (
        f"job {job.job_id}: index {job.job_index}, slots {job.slot_base}..{job.slot_end - 1}"
    )


def job_remove(s: Session) -> Output:
    jobs = Jobs(s.client, s.p4info())
    jobs.get(s.args.job_id)  # UnknownJob before touching anything
    evicted = HotKeys(s.client, s.p4info()).clear(s.args.job_id)
    revoked = Tenancy(s.client, s.p4info()).clear(s.args.job_id)
    job = jobs.remove(s.args.job_id)
    return {**job.as_dict(), "hot_keys_evicted": evicted, "admissions_revoked": revoked}, (
        f"job {job.job_id} removed ({evicted} hot keys evicted, {revoked} admissions revoked). "
        "Its index and slots keep their "
        "dedup and sum registers, which P4Runtime cannot reset on BMv2: run 'pipeline push' "
        "before a job reuses them."
    )


def job_list(s: Session) -> Output:
    jobs = Jobs(s.client, s.p4info()).list()
    rows = [(j.job_id, j.job_index, j.slot_base, j.slot_count) for j in jobs]
    text = table(["job_id", "index", "slot_base", "slots"], rows) if jobs else "no jobs"
    return [j.as_dict() for j in jobs], text


# --- tenancy ---


def tenancy_install(s: Session) -> Output:
    """Admit the job's workers and PS from a topology: workers in the experiment's order
    (hosts of role worker, the first --workers of them, worker id = position)."""
    a = s.args
    topo = load_routes_topology(a.topo)
    if a.ps:
        try:
            topo = topo.with_parameter_servers(a.ps)
        except (KeyError, ValueError) as e:
            raise BadInput(f"--ps: {e}") from None
    workers = [h.name for h in topo.workers]
    if a.workers is not None:
        if a.workers > len(workers):
            raise BadInput(f"--workers {a.workers}: {a.topo} has {len(workers)} worker hosts")
        workers = workers[: a.workers]
    ps = [h.name for h in topo.parameter_servers]
    wanted = admissions_from_topology(topo, a.switch, a.job_id, workers, ps)
    data: dict[str, Any] = {"switch": a.switch, "admissions": [x.as_dict() for x in wanted]}
    lines = [str(x) for x in wanted]
    if not a.dry_run:
        result = Tenancy(s.client, s.p4info()).install(a.job_id, wanted, a.replace)
        data.update(result)
        lines.append(
            f"{a.switch}: job {a.job_id}, {len(wanted)} admissions ({result['inserted']} "
            f"inserted, {result['kept']} kept, {result['deleted']} deleted)"
        )
    return data, "\n".join(lines) or "nothing to admit on this switch"


def _one_admission(s: Session) -> Admission:
    a = s.args
    return admission(a.job_id, None if a.ps else a.worker_id, a.port, a.addr)


def tenancy_admit(s: Session) -> Output:
    adm = _one_admission(s)
    n = Tenancy(s.client, s.p4info()).admit([adm])
    return {**adm.as_dict(), "inserted": n}, f"{adm}: " + ("admitted" if n else "already admitted")


def tenancy_revoke(s: Session) -> Output:
    adm = _one_admission(s)
    if not Tenancy(s.client, s.p4info()).revoke([adm]):
        raise NotFound(f"{adm} is not admitted")
    return {**adm.as_dict(), "deleted": 1}, f"{adm}: revoked"


def tenancy_list(s: Session) -> Output:
    adms = Tenancy(s.client, s.p4info()).list(s.args.job_id)
    rows = [(x.job_id, x.who, x.port, x.as_dict()["addr"]) for x in adms]
    text = table(["job_id", "who", "port", "addr"], rows) if adms else "no admissions"
    return [x.as_dict() for x in adms], text


def tenancy_clear(s: Session) -> Output:
    n = Tenancy(s.client, s.p4info()).clear(s.args.job_id)
    which = f"job {s.args.job_id}" if s.args.job_id is not None else "all jobs"
    return {"deleted": n}, f"{which}: {n} admissions revoked"


# --- hot keys ---


def hotkeys_install(s: Session) -> Output:
    a = s.args
    job = Jobs(s.client, s.p4info()).get(a.job_id)
    hot = HotKeys(s.client, s.p4info())
    data: dict[str, Any] = {}
    lines = []
    if a.keys is not None:
        if a.budget is not None or a.coverage is not None or a.with_hits or a.min_updates:
            raise BadInput(
                "--budget, --coverage, --min-updates and --with-hits go with --stats, not --keys"
            )
        keys = a.keys
    else:
        freqs = load_stats(a.stats)
        if a.with_hits:
            hits = {hk.key: hk.packets for hk in hot.list(job.job_id, counters=True)}
            freqs = combine(freqs, hits, a.hits_weight)
        budget = a.budget if a.budget is not None or a.coverage is not None else job.slot_count
        chosen = choose(freqs, budget, a.coverage, a.min_updates)
        keys = chosen.keys
        data["hotset"] = chosen.as_dict()
        lines.append(chosen.describe())
    if a.dry_run:
        data["keys"] = keys
        return data, "\n".join([*lines, f"would install {len(keys)} keys (dry run)"])
    start = time.perf_counter()
    report = hot.install(job, keys, replace=a.replace)
    elapsed = time.perf_counter() - start
    rate = report.entries_written / elapsed if elapsed > 0 else 0.0
    data.update(
        added=len(report.added),
        kept=report.kept,
        repaired=report.repaired,
        evicted=report.evicted,
        entries_written=report.entries_written,
        seconds=elapsed,
    )
    lines.append(
        f"job {job.job_id}: {len(report.added)} keys added, {report.kept} kept, "
        f"{report.repaired} repaired, {report.evicted} evicted "
        f"({report.entries_written} entries in {elapsed:.2f} s, {rate:.0f} entries/s)"
    )
    return data, "\n".join(lines)


def hotkeys_list(s: Session) -> Output:
    hks = HotKeys(s.client, s.p4info()).list(s.args.job_id, counters=True)
    if s.args.keys is not None:
        wanted = set(s.args.keys)
        hks = [hk for hk in hks if hk.key in wanted]
    rows = [
        (hk.job_id, hk.key, hk.offset, hk.packets, hk.bytes, _instances(hk.offsets, hk.offset))
        for hk in hks
    ]
    headers = ["job_id", "key", "offset", "hits", "bytes", "instances"]
    text = table(headers, rows) if hks else "no hot keys"
    return [hk.as_dict() for hk in hks], text


def _instances(offsets: list[int | None], offset: int) -> str:
    """'8/8' when every instance maps the key to `offset`; else which ones do."""
    good = [i for i, o in enumerate(offsets) if o == offset]
    if len(good) == len(offsets):
        return f"{len(good)}/{len(offsets)}"
    return f"{len(good)}/{len(offsets)} partial: " + ",".join(map(str, good))


def hotkeys_auto(s: Session) -> Output:
    a = s.args
    p4 = s.p4info()
    job = Jobs(s.client, p4).get(a.job_id)
    hot = HotKeys(s.client, p4)
    budget = job.slot_count if a.budget is None else a.budget
    if budget > job.slot_count:
        raise BadInput(f"--budget {budget}: job {job.job_id} has only {job.slot_count} slots")
    sources: list[RateSource] = [SwitchHitsSource(hot, job.job_id, a.hits_weight)]
    if a.freq:
        sources.append(PSFrequencySource(a.freq))
    if a.sketch:
        sources.append(SketchSource(Sketch(s.client, p4), job.job_id, a.sketch))
    log_file = open(a.log, "a") if a.log else None  # noqa: SIM115 (closed below)

    def log(line: str) -> None:
        if not a.json:
            print(line, flush=True)
        if log_file is not None:
            log_file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} job {job.job_id} {line}\n")
            log_file.flush()

    loop = OnlineController(
        SwitchTarget(hot, job),
        CombinedSource(sources),
        ChangeRateEstimator(a.change_threshold) if a.decay is None else RateEstimator(a.decay),
        Hysteresis(budget, a.hysteresis, a.max_changes, a.min_rate, a.confidence),
        log,
    )
    try:
        loop.run(a.interval, a.steps)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the loop; the summary below still goes out
    finally:
        if log_file is not None:
            log_file.close()
    added = sum(len(r.added) for r in loop.history)
    removed = sum(len(r.removed) for r in loop.history)
    data = {"job_id": job.job_id, "budget": budget, "steps": [r.as_dict() for r in loop.history]}
    return data, f"job {job.job_id}: {len(loop.history)} steps, +{added} -{removed} keys"


def hotkeys_evict(s: Session) -> Output:
    n = HotKeys(s.client, s.p4info()).evict(s.args.job_id, s.args.keys)
    return {"evicted": n}, f"job {s.args.job_id}: {n} keys evicted"


def hotkeys_clear(s: Session) -> Output:
    n = HotKeys(s.client, s.p4info()).clear(s.args.job_id)
    which = f"job {s.args.job_id}" if s.args.job_id is not None else "all jobs"
    return {"evicted": n}, f"{which}: {n} hot keys evicted"


# --- counters, stats, loss ---


def counters_show(s: Session) -> Output:
    p4 = s.p4info()
    hks = HotKeys(s.client, p4).list(s.args.job_id, counters=True)
    top = sorted(hks, key=lambda hk: (-hk.packets, hk.job_id, hk.key))[: s.args.top]
    instances = Stats(s.client, p4).hot_key_hits()
    data = {
        "instances": {c.name: {"packets": c.packets, "bytes": c.bytes} for c in instances},
        "keys": [hk.as_dict() for hk in top],
    }
    text = table(["table", "hits", "bytes"], [(c.name, c.packets, c.bytes) for c in instances])
    if top:
        rows = [(hk.job_id, hk.key, hk.packets, hk.bytes) for hk in top]
        text += f"\n\ntop {len(top)} of {len(hks)} hot keys\n"
        text += table(["job_id", "key", "hits", "bytes"], rows)
    return data, text


def stats_show(s: Session) -> Output:
    cells = Stats(s.client, s.p4info()).read()
    if not s.args.all:
        cells = [c for c in cells if not c.name.startswith("cell_") or c.packets]
    data = {c.name: {"packets": c.packets, "bytes": c.bytes} for c in cells}
    return data, table(["stat", "packets", "bytes"], [(c.name, c.packets, c.bytes) for c in cells])


def stats_clear(s: Session) -> Output:
    Stats(s.client, s.p4info()).clear()
    return {"cleared": True}, "stats cleared"


def loss_set(s: Session) -> Output:
    rate = DropSim(s.client, s.p4info()).set(s.args.probability)
    text = f"drop probability {rate / DROP_SCALE:.6g} (rate {rate}/{DROP_SCALE})"
    return {"rate": rate, "probability": rate / DROP_SCALE}, text


def loss_show(s: Session) -> Output:
    rate = DropSim(s.client, s.p4info()).get()
    text = f"drop probability {rate / DROP_SCALE:.6g} (rate {rate}/{DROP_SCALE})"
    return {"rate": rate, "probability": rate / DROP_SCALE}, text


# --- aggregation at every leaf: service-address, chain-next ---

_UNSET = {
    ServiceAddress: "none: PS ops are answered whatever their address, partial PUSHes pass",
    ChainNext: "none: this switch is the last of a WRITEBACK chain and acks it",
}


def _address(kind: type[AddressTable], value: int) -> Output:
    shown = str(ipaddress.IPv4Address(value)) if value else None
    return {"address": shown}, shown or _UNSET[kind]


def address_set(kind: type[AddressTable], s: Session) -> Output:
    return _address(kind, kind(s.client, s.p4info()).set(s.args.address))


def address_show(kind: type[AddressTable], s: Session) -> Output:
    return _address(kind, kind(s.client, s.p4info()).get())


def address_clear(kind: type[AddressTable], s: Session) -> Output:
    kind(s.client, s.p4info()).clear()
    return _address(kind, 0)
