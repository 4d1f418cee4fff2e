"""The PS's request log (`--log`): one CSV row per request received, and per COLLECT or
WRITEBACK sent (hosts/switch_channel.py writes those)."""

from __future__ import annotations

from pathlib import Path

from contract.codec import Message
from hosts.agent import Address
from hosts.stats import CsvLog

# Request log (--log): one row per request received (and per COLLECT/WRITEBACK sent).
# arrival = wall clock (s) when the kernel received the datagram (SO_TIMESTAMPNS; where that is
# not available, when it was read), start = when its handling began (so start - arrival is
# queueing at the PS: its socket buffer plus the batch ahead of it), reply =
# when the answer was sent (empty: none; DONE rows are written at the barrier, so their reply
# is the DONE_ACK time); result = accepted | dup | stale | replied | held | barrier | reack |
# waiting | collected | cached | unanswered | an error counter name (malformed, bad_key...);
# stale = for a PULL the PS answered, how many iterations' sums its value lacks: the pull's
# iteration - 1 - the newest applied one (0 in BSP, <= S in ssp:S; docs/design.md section 8).
LOG_COLUMNS = (
    "arrival",
    "start",
    "reply",
    "op",
    "worker",
    "seq",
    "iteration",
    "entries",
    "mask",
    "result",
    "peer",
    "stale",
)


class RequestLog:
    """The request log's rows; a no-op until `open` is given a path (logging disabled)."""

    def __init__(self) -> None:
        self._log = CsvLog(None, LOG_COLUMNS)
        self._peers: dict[Address, str] = {}  # address -> "ip:port", formatted once

    def open(self, path: str | Path | None) -> None:
        self._log = CsvLog(path, LOG_COLUMNS)

    def close(self) -> None:
        self._log.close()

    def row(
        self,
        arrival: float,
        start: float,
        reply: float | None,
        op: str,
        m: Message | None,
        result: str,
        peer: Address,
        stale: int | None = None,
    ) -> None:
        """One row (switch_channel.RowWriter): `m` None for a datagram that did not decode."""
        if self._log.enabled:
            f = ("",) * 5 if m is None else (m.worker_id, m.seq, m.iteration, m.count, m.mask)
            self._log.write(
                (
                    f"{arrival:.6f}",
                    f"{start:.6f}",
                    "" if reply is None else f"{reply:.6f}",
                    op,
                    *f,
                    result,
                    self._peers.get(peer) or self._peers.setdefault(peer, f"{peer[0]}:{peer[1]}"),
                    "" if stale is None else stale,
                )
            )
