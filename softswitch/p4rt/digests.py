"""Digests over P4Runtime: DigestEntry configuration, DigestList on the stream, acks.

Follows PI's digest manager (p4lang/PI proto/frontend/src/digest_mgr.cpp), which serves
BMv2's simple_switch_grpc, in what a controller can see:
- a digest is streamed only while a DigestEntry configures it (INSERT; MODIFY and DELETE of
  an unconfigured one are NOT_FOUND, a second INSERT is ALREADY_EXISTS); others are dropped;
- samples gather into one DigestList, sent when it holds max_list_size samples (if not 0),
  when max_timeout_ns has passed since its first sample, or at once if max_timeout_ns is 0;
  list ids count from 1 per digest; only the primary client (default role) receives lists;
- with ack_timeout_ns > 0, a sample equal to one in a list not yet acknowledged (and not
  older than ack_timeout_ns) is dropped; a DigestListAck or the timeout frees it;
- members are canonical bitstrings (leading zero bytes stripped, 0 as one zero byte), as
  PI's bytestring_pi_to_p4rt writes them.
One difference, on purpose: PI sends a full list only when the ack cache is in use (it
counts cached samples), so with ack_timeout_ns 0 its lists end by timeout only; here
max_list_size always applies, as the spec describes it. Tests compare samples, not lists.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from p4.v1 import p4runtime_pb2

from p4rt.bytestrings import encode
from p4rt.errors import P4RTError
from p4rt.p4info import P4InfoIndex

log = logging.getLogger(__name__)

_INSERT = p4runtime_pb2.Update.INSERT
_MODIFY = p4runtime_pb2.Update.MODIFY
_DELETE = p4runtime_pb2.Update.DELETE
Sample = tuple[int, ...]


@dataclass
class _Digest:
    """One digest of the P4Info: its struct's members and its streaming state."""

    digest_id: int
    name: str
    widths: tuple[int, ...]
    config: p4runtime_pb2.DigestEntry | None = None
    samples: list[Sample] = field(default_factory=list)  # the list being built
    started: float = 0.0  # monotonic time of its first sample
    next_list: int = 1
    unacked: dict[int, tuple[float, list[Sample]]] = field(default_factory=dict)
    cache: set[Sample] = field(default_factory=set)


class DigestManager:
    """Digest configuration and delivery of one device; thread safe.

    `send(message)` delivers a StreamMessageResponse to the primary client and returns
    False when there is none."""

    def __init__(self, send: Callable[[p4runtime_pb2.StreamMessageResponse], bool]) -> None:
        self._send = send
        self._cond = threading.Condition()
        self._by_id: dict[int, _Digest] = {}
        self._by_name: dict[str, _Digest] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.counts: collections.Counter = collections.Counter()

    # ---- configuration (control plane) ----

    def set_pipeline(self, index: P4InfoIndex) -> None:
        """A new pipeline's P4Info: its digests, none configured, nothing pending."""
        with self._cond:
            self._by_id.clear()
            self._by_name.clear()
            for digest in index.objects("digests"):
                widths = index.digest_widths(digest)
                if widths is None:  # not a struct: no samples of ours fit it
                    continue
                d = _Digest(digest.preamble.id, digest.preamble.name, widths)
                self._by_id[d.digest_id] = d
                self._by_name[d.name] = d

    def _digest(self, digest_id: int) -> _Digest:
        d = self._by_id.get(digest_id)
        if d is None:
            raise P4RTError(grpc.StatusCode.NOT_FOUND, f"unknown digest id {digest_id:#x}")
        return d

    def write(self, kind: int, entry: p4runtime_pb2.DigestEntry) -> None:
        """One DigestEntry update; raises P4RTError as PI answers."""
        with self._cond:
            d = self._digest(entry.digest_id)
            if kind == _INSERT:
                if d.config is not None:
                    raise P4RTError(
                        grpc.StatusCode.ALREADY_EXISTS, f"digest {d.name} already configured"
                    )
            elif kind in (_MODIFY, _DELETE):
                if d.config is None:
                    raise P4RTError(grpc.StatusCode.NOT_FOUND, f"digest {d.name} not configured")
            else:
                raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT, "update type is not set")
            if kind == _DELETE:
                d.config = None
                d.samples.clear()
                d.unacked.clear()
                d.cache.clear()
                return
            c = entry.config
            if c.max_timeout_ns < 0 or c.ack_timeout_ns < 0 or c.max_list_size < 0:
                raise P4RTError(
                    grpc.StatusCode.INVALID_ARGUMENT, "digest config values must not be negative"
                )
            d.config = p4runtime_pb2.DigestEntry()
            d.config.CopyFrom(entry)
            self._start()
            self._cond.notify()

    def read(self, entry: p4runtime_pb2.DigestEntry) -> list[bytes]:
        """ReadResponse.entities elements of the configured digest(s) asked for."""
        with self._cond:
            if entry.digest_id:
                d = self._digest(entry.digest_id)
                if d.config is None:
                    raise P4RTError(grpc.StatusCode.NOT_FOUND, f"digest {d.name} not configured")
                found = [d]
            else:
                found = [d for d in self._by_id.values() if d.config is not None]
            resp = p4runtime_pb2.ReadResponse()
            for d in found:
                resp.entities.add().digest_entry.CopyFrom(d.config)
        return [resp.SerializeToString()] if found else []

    def ack(self, digest_id: int, list_id: int) -> None:
        """DigestListAck: the list's samples may be sent again."""
        with self._cond:
            d = self._by_id.get(digest_id)
            if d is not None:
                _, samples = d.unacked.pop(list_id, (0.0, []))
                d.cache.difference_update(samples)

    # ---- samples (data plane) ----

    def learn(self, name: str, sample: Sample) -> None:
        """A digest the pipeline emitted (called from the packet thread)."""
        with self._cond:
            d = self._by_name.get(name)
            if d is None or d.config is None:
                self.counts["digest_unconfigured"] += 1
                return
            c = d.config.config
            if c.ack_timeout_ns > 0:
                if sample in d.cache:
                    self.counts["digest_suppressed"] += 1
                    return
                d.cache.add(sample)
            if not d.samples:
                d.started = time.monotonic()
            d.samples.append(sample)
            if c.max_timeout_ns == 0 or (c.max_list_size and len(d.samples) >= c.max_list_size):
                self._flush(d)
            else:
                self._cond.notify()

    def _flush(self, d: _Digest) -> None:
        msg = p4runtime_pb2.StreamMessageResponse()
        out = msg.digest
        out.digest_id = d.digest_id
        out.list_id = d.next_list
        out.timestamp = time.monotonic_ns()
        for sample in d.samples:
            members = out.data.add().struct.members
            for value in sample:
                members.add().bitstring = encode(value)
        if d.config is not None and d.config.config.ack_timeout_ns > 0:
            d.unacked[d.next_list] = (time.monotonic(), d.samples)
        d.next_list += 1
        d.samples = []
        if self._send(msg):
            self.counts["digest_lists"] += 1
        else:
            self.counts["digest_lists_dropped"] += 1

    # ---- timeouts ----

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="digests", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                wake = now + 1.0
                for d in self._by_id.values():
                    if d.config is None:
                        continue
                    c = d.config.config
                    if d.samples:
                        due = d.started + c.max_timeout_ns / 1e9
                        if due <= now:
                            self._flush(d)
                        else:
                            wake = min(wake, due)
                    if d.unacked:
                        ttl = c.ack_timeout_ns / 1e9
                        for list_id, (sent, samples) in list(d.unacked.items()):
                            if sent + ttl <= now:
                                del d.unacked[list_id]
                                d.cache.difference_update(samples)
                            else:
                                wake = min(wake, sent + ttl)
                self._cond.wait(max(0.0, wake - time.monotonic()))

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
