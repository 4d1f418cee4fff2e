"""One P4Runtime session with one switch: channel, arbitration stream, Write/Read, packets.

Written on the generated stubs rather than on p4runtime_sh.p4runtime.P4RuntimeClient, because
that class calls sys.exit() when the handshake fails, prints to stdout, raises plain
grpc.RpcError for everything but Write and has no RPC timeouts; here every grpc.RpcError is
translated once (controller.errors.translate_rpc_error) and a process may hold many clients.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Union

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.errors import (
    ControllerError,
    NoPipeline,
    SwitchUnreachable,
    UpdateError,
    WriteError,
    translate_rpc_error,
    write_error,
)
from p4rt import wire

log = logging.getLogger(__name__)

ElectionId = Union[int, tuple[int, int]]
# Updates per Write RPC. A failing batch's error lists every update (p4.v1.Error each), and
# that list travels in gRPC trailers: the embedded switch keeps every update's code only up
# to ~140 updates (softswitch/p4rt/errors.py), and BMv2 (PI) sends its whole list, ~150
# bytes a failure, which needs _MAX_METADATA below. Orphan repair (hot_keys.py) needs the
# codes, so batches stay at 100.
WRITE_BATCH = 100
_MAX_METADATA = 1 << 20  # gRPC's client default is 8 KiB (soft) / 16 KiB (hard)
# A Read streams whole tables (up to 16384 entries each); a server on pure-Python protobuf,
# like the embedded target, needs seconds per table, so reads get a longer deadline.
READ_TIMEOUT = 120.0
_MAX_MESSAGE = 64 << 20  # a BMv2 JSON can exceed gRPC's 4 MB default
# After a lost stream the client opens a new one and re-arbitrates, retrying with these
# pauses (doubling up to the last) until it succeeds or close() is called.
RECONNECT_FIRST, RECONNECT_MAX = 0.1, 2.0
_Type = p4runtime_pb2.Update.Type


class SwitchClient:
    """A P4Runtime client for one switch (device). Use as a context manager or call close().

    `wait` is how long connect() waits for the server to come up; 0 fails at once when
    nothing listens. `timeout` bounds every unary RPC and Write batch; a Read stream gets
    max(timeout, READ_TIMEOUT).

    A session that loses its stream (the switch restarted, the connection broke) reconnects
    by itself: it opens a new stream and re-arbitrates with the same election id, retrying
    until close(). RPCs made meanwhile wait up to `timeout` for that. `reconnects` counts
    the sessions re-established; a switch that restarted has lost its pipeline and tables,
    which the caller re-installs (the client cannot know them).
    """

    def __init__(
        self,
        addr: str,
        device_id: int = 0,
        election_id: ElectionId = (0, 1),
        timeout: float = 10.0,
        wait: float = 0.0,
    ) -> None:
        self.addr = addr
        self.device_id = device_id
        self.election_id = (0, election_id) if isinstance(election_id, int) else election_id
        self.timeout = timeout
        self.wait = wait
        self._channel: grpc.Channel | None = None
        self._stub: p4runtime_pb2_grpc.P4RuntimeStub | None = None
        self._write = None
        self._read_raw = None
        self._out: queue.Queue = queue.Queue()
        self._arbitration: queue.Queue = queue.Queue()
        self._packets: queue.Queue = queue.Queue()
        self._digests: queue.Queue = queue.Queue()
        self._stream: Any = None  # the StreamChannel call: an iterator of replies
        self._thread: threading.Thread | None = None
        self._stream_error: ControllerError | None = None
        self._closing = False
        self._established = False  # the first arbitration succeeded: reconnect after a loss
        self._session = threading.Event()  # a stream is open and has been answered
        self.reconnects = 0
        self.is_primary = False

    # --- session ---

    def connect(self) -> SwitchClient:
        """Open the channel and the stream, and arbitrate; returns self."""
        options = [
            ("grpc.enable_http_proxy", 0),  # an http_proxy must never catch 127.0.0.1 traffic
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_metadata_size", _MAX_METADATA),
            ("grpc.absolute_max_metadata_size", _MAX_METADATA),
        ]
        self._channel = grpc.insecure_channel(self.addr, options=options)
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        # Write takes request bytes (built by p4rt.wire), not a message.
        self._write = self._channel.unary_unary(
            "/p4.v1.P4Runtime/Write",
            request_serializer=None,
            response_deserializer=p4runtime_pb2.WriteResponse.FromString,
        )
        # Read whose replies stay bytes, for p4rt.wire's decoders (read_raw).
        self._read_raw = self._channel.unary_stream(
            "/p4.v1.P4Runtime/Read",
            request_serializer=None,  # bytes, built by p4rt.wire
            response_deserializer=None,
        )
        try:
            # A first unary RPC: fails at once with UNAVAILABLE when nothing listens.
            self._stub.Capabilities(
                p4runtime_pb2.CapabilitiesRequest(),
                timeout=max(self.wait, self.timeout),
                wait_for_ready=self.wait > 0,
            )
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                self.close()
                raise translate_rpc_error(e, self.addr, "Capabilities") from None
        self._closing = self._established = False
        self._open_stream()
        self._thread = threading.Thread(
            target=self._run_streams, name=f"p4rt-stream-{self.addr}", daemon=True
        )
        self._thread.start()
        self._arbitrate()
        self._established = True
        return self

    def _open_stream(self) -> None:
        """A new StreamChannel with a queue of its own (the old stream's request iterator
        may still be waiting on the old one), whose first message is our arbitration."""
        self._out = queue.Queue()
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        self._out.put(req)
        assert self._stub is not None  # opened only on a connected channel
        self._stream = self._stub.StreamChannel(self._requests(self._out))

    @staticmethod
    def _requests(out: queue.Queue) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        while True:
            msg = out.get()
            if msg is None:
                return
            yield msg

    def _run_streams(self) -> None:
        """Receive on the stream; once the session was established, a lost stream is
        replaced by a new one (re-arbitrating with our election id) until close()."""
        pause = RECONNECT_FIRST
        while True:
            answered = self._receive()
            if self._closing or not self._established:
                break
            self._out.put(None)  # ends the lost stream's request iterator
            if answered:
                pause = RECONNECT_FIRST
                log.info(
                    "lost the P4Runtime stream to %s (%s); reconnecting",
                    self.addr,
                    self._stream_error or "closed by the switch",
                )
            deadline = time.monotonic() + pause
            while not self._closing and time.monotonic() < deadline:
                time.sleep(0.02)
            pause = min(pause * 2, RECONNECT_MAX)
            if self._closing or self._stub is None:
                break
            try:
                self._open_stream()
            except (ValueError, AttributeError):  # close() closed the channel under us
                break
        self._session.clear()
        self._arbitration.put(None)
        self._packets.put(None)
        self._digests.put(None)

    def _receive(self) -> bool:
        """Read one stream to its end; True if the switch answered our arbitration on it."""
        answered = False
        try:
            for msg in self._stream:
                if msg.HasField("arbitration"):
                    self.is_primary = msg.arbitration.status.code == code_pb2.OK
                    if not answered and self._established:
                        self.reconnects += 1
                        log.info(
                            "re-arbitrated with %s as %s",
                            self.addr,
                            "primary" if self.is_primary else "backup",
                        )
                    answered = True
                    self._session.set()
                    self._arbitration.put(msg.arbitration)
                elif msg.HasField("packet"):
                    self._packets.put(msg.packet)
                elif msg.HasField("digest"):
                    self._digests.put(msg.digest)
                elif msg.HasField("error"):
                    log.warning("switch %s reported a stream error: %s", self.addr, msg.error)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self._stream_error = translate_rpc_error(e, self.addr, "StreamChannel")
        finally:
            self.is_primary = False
            self._session.clear()
        return answered

    def _arbitrate(self) -> None:
        try:
            reply = self._arbitration.get(timeout=self.timeout)
        except queue.Empty:
            self.close()
            raise SwitchUnreachable(
                f"switch at {self.addr} did not answer the arbitration within {self.timeout} s"
            ) from None
        if reply is None:
            err = self._stream_error or SwitchUnreachable(
                f"switch at {self.addr} closed the stream during arbitration"
            )
            self.close()
            raise err

    def close(self) -> None:
        """End the session. The stream is half-closed and awaited rather than cancelled, so
        the server has dropped our election id when close() returns (a following client may
        reuse it)."""
        self._closing = True
        self._out.put(None)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=min(self.timeout, 2.0))
        if self._stream is not None:
            self._stream.cancel()  # no-op when the stream has ended
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stream = None
        self._stub = None
        self._write = None
        self._read_raw = None

    def __enter__(self) -> SwitchClient:
        return self if self._channel is not None else self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _await_session(self) -> None:
        """After a lost stream, wait (up to `timeout`) until the client has re-arbitrated,
        so that a write after a switch restart is not refused for want of a stream."""
        if self._stub is None:
            raise SwitchUnreachable(f"client for {self.addr} is not connected")
        if self._established and not self._session.wait(self.timeout):
            raise SwitchUnreachable(
                f"lost the P4Runtime stream to {self.addr} and could not re-arbitrate within "
                f"{self.timeout} s: {self._stream_error or 'no answer'}"
            )

    def _call(self, name: str, request: object) -> Any:
        self._await_session()
        try:
            return getattr(self._stub, name)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise translate_rpc_error(e, self.addr, name) from None

    def _set_election(self, req: Any) -> None:
        req.device_id = self.device_id
        req.election_id.high, req.election_id.low = self.election_id

    # --- RPCs ---

    def api_version(self) -> str:
        return self._call("Capabilities", p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version

    def set_pipeline(self, p4info: p4info_pb2.P4Info, device_config: bytes = b"") -> None:
        """SetForwardingPipelineConfig(VERIFY_AND_COMMIT); `device_config` is e.g. BMv2 JSON."""
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        self._set_election(req)
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        self._call("SetForwardingPipelineConfig", req)

    def get_pipeline(self) -> p4info_pb2.P4Info:
        """The switch's P4Info; raises NoPipeline if none was set."""
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE,
        )
        try:
            reply = self._call("GetForwardingPipelineConfig", req)
        except ControllerError as e:
            if "FAILED_PRECONDITION" in str(e):
                raise NoPipeline(f"switch at {self.addr} has no pipeline: {e}") from None
            raise
        if not reply.config.HasField("p4info") or not reply.config.p4info.tables:
            raise NoPipeline(f"switch at {self.addr} has no pipeline; run 'pipeline push'")
        return reply.config.p4info

    def write(
        self,
        updates: Sequence[p4runtime_pb2.Update | bytes],
        batch_size: int = WRITE_BATCH,
        stop_on_error: bool = True,
    ) -> None:
        """Send `updates` (messages, or Update bytes from p4rt.wire) in batches with
        CONTINUE_ON_ERROR.

        A failure raises a WriteError subclass whose `errors` index into `updates`; every
        other update of a failing batch is applied. By default the batches after the first
        failing one are not sent; with `stop_on_error=False` they are, and the errors of all
        batches are raised together at the end.
        """
        if self._write is None:
            raise SwitchUnreachable(f"client for {self.addr} is not connected")
        self._await_session()
        errors: list[UpdateError] = []
        for start in range(0, len(updates), batch_size):
            batch = [
                u if isinstance(u, bytes) else u.SerializeToString()
                for u in updates[start : start + batch_size]
            ]
            req = wire.write_request(
                self.device_id,
                self.election_id,
                batch,
                p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR,
            )
            try:
                self._write(req, timeout=self.timeout)
            except grpc.RpcError as e:
                err = translate_rpc_error(e, self.addr, "Write", start, len(batch))
                if stop_on_error or not isinstance(err, WriteError):
                    raise err from None
                errors += err.errors
        if errors:
            raise write_error(errors)

    def write_entries(
        self,
        kind: str,
        entries: Iterable[p4runtime_pb2.TableEntry | bytes],
        batch_size: int = WRITE_BATCH,
        stop_on_error: bool = True,
    ) -> int:
        """INSERT/MODIFY/DELETE table entries (messages, or TableEntry bytes from an
        EntryEncoder); returns how many were sent. Errors as in write()."""
        type_ = _Type.Value(kind.upper())
        updates = [
            wire.update(type_, e if isinstance(e, bytes) else e.SerializeToString())
            for e in entries
        ]
        self.write(updates, batch_size, stop_on_error)
        return len(updates)

    def read(self, entities: Iterable[p4runtime_pb2.Entity]) -> Iterator[p4runtime_pb2.Entity]:
        """Stream the entities matching the (wildcard) `entities`."""
        self._await_session()
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.extend(entities)
        assert self._stub is not None  # _await_session returns with a connected stub
        try:
            for reply in self._stub.Read(req, timeout=max(self.timeout, READ_TIMEOUT)):
                yield from reply.entities
        except grpc.RpcError as e:
            raise translate_rpc_error(e, self.addr, "Read") from None

    def read_raw(self, entities: Iterable[p4runtime_pb2.Entity | bytes]) -> Iterator[bytes]:
        """read(), each ReadResponse left serialized (p4rt.wire decodes the ones that bulk
        reads need, ~20x faster than the pure-Python protobuf here); an entity may be given
        serialized (wire.counter_entity)."""
        if self._read_raw is None:
            raise SwitchUnreachable(f"client for {self.addr} is not connected")
        self._await_session()
        encoded = [e if isinstance(e, bytes) else e.SerializeToString() for e in entities]
        req = wire.read_request(self.device_id, encoded)
        try:
            yield from self._read_raw(req, timeout=max(self.timeout, READ_TIMEOUT))
        except grpc.RpcError as e:
            raise translate_rpc_error(e, self.addr, "Read") from None

    def read_table(self, entry: p4runtime_pb2.TableEntry) -> list[wire.RawEntry]:
        """The table entries matching `entry`, decoded by p4rt.wire (P4Info.decode_entry
        gives their names and ints)."""
        request = p4runtime_pb2.Entity(table_entry=entry)
        return [e for reply in self.read_raw([request]) for e in wire.table_entries(reply)]

    # --- packets ---

    def packet_out(self, payload: bytes, metadata: Mapping[int, bytes]) -> None:
        """Send a PacketOut; `metadata` maps packet_out metadata id -> canonical bytes."""
        req = p4runtime_pb2.StreamMessageRequest()
        req.packet.payload = payload
        for mid, value in metadata.items():
            req.packet.metadata.add(metadata_id=mid, value=value)
        self._out.put(req)

    def packet_in(self, timeout: float = 1.0) -> p4runtime_pb2.PacketIn | None:
        """The next PacketIn, or None after `timeout` seconds or when the stream ended."""
        try:
            return self._packets.get(timeout=timeout)
        except queue.Empty:
            return None

    # --- digests ---

    def digest_list(self, timeout: float = 1.0) -> p4runtime_pb2.DigestList | None:
        """The next DigestList, or None after `timeout` seconds or when the stream ended."""
        try:
            return self._digests.get(timeout=timeout)
        except queue.Empty:
            return None

    def ack_digest(self, digest_id: int, list_id: int) -> None:
        """DigestListAck: the switch may send the list's samples again."""
        req = p4runtime_pb2.StreamMessageRequest()
        req.digest_ack.digest_id = digest_id
        req.digest_ack.list_id = list_id
        self._out.put(req)
