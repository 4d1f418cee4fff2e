"""The P4Runtime gRPC service of the embedded switch (p4runtime 1.4.1 protos).

One device per server. Control-plane requests are serialised by one lock (the packet thread
never takes it: state writes are single dict assignments, see softswitch/state.py). Packet
I/O goes through a `Dataplane` (softswitch.runtime): PacketOut -> `inject(cpu_port, header +
payload)`; the data plane hands frames the pipeline sent to the CPU port to `packet_in()`.

Write and Read skip protobuf messages where it is slow (pure-Python protobuf 3.20): Write
receives the request bytes and parses them with p4rt/wire.py (protobuf only for what that
parser does not cover); Read yields ReadResponse bytes that entities.py wrote with p4rt/wire.py.

Abuse limits. gRPC's Python server runs each RPC, a StreamChannel for its whole life, on one
of `max_workers` threads, so open streams could leave none for Write/Read/Get (PI's C++
server grows its pool instead). Hence at most `max_workers - RESERVED_WORKERS` streams are
open at once, at most MAX_UNARBITRATED of them before their first MasterArbitrationUpdate,
and a stream that sends none within `arbitration_timeout` seconds is closed with
FAILED_PRECONDITION; the stream beyond a cap gets RESOURCE_EXHAUSTED at once (the spec's
code for "the number of open streams exceeds the supported limit"). A request that does not
parse is answered as gRPC itself answers it (INTERNAL "Exception deserializing request!")
but logs one line, not gRPC's traceback.
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from contract.constants import CPU_PORT
from contract.names import DIGEST_SKETCH
from p4rt.bytestrings import decode, encode
from p4rt.errors import P4RTError
from p4rt.p4info import P4InfoIndex
from p4rt.proto import Fallback
from p4rt.wire import (
    CounterReadIn,
    RawEntry,
    WriteIn,
    chunks,
    parse_counter_read,
    parse_write_request,
    write_in,
)
from softswitch.p4rt.arbitration import Arbiter, Client, election_int
from softswitch.p4rt.binding import Binding, BindingError, bind
from softswitch.p4rt.codec import header_len, pack_header, unpack_header
from softswitch.p4rt.digests import DigestManager
from softswitch.p4rt.entities import read_counter, read_entity, write_update
from softswitch.p4rt.errors import STATUS_DETAILS_KEY, batch_status

log = logging.getLogger(__name__)

API_VERSION = "1.4.1"
MAX_QUEUED_PACKET_INS = 1024  # per stream; more are dropped (and counted)
RESERVED_WORKERS = 8  # server threads streams may never take (module docstring)
MAX_UNARBITRATED = 8  # open streams that have not arbitrated yet
ARBITRATION_TIMEOUT = 10.0  # seconds from opening a stream to its first arbitration
MAX_LOGGED_UNDECODABLE = 20  # then one line per 1000
UNDECODABLE = "Exception deserializing request!"  # what gRPC answers
SetReq = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetReq = p4runtime_pb2.GetForwardingPipelineConfigRequest
_CLOSED = object()


class ServerStartError(RuntimeError):
    """The gRPC server could not listen on the requested address."""


class Dataplane(Protocol):
    def inject(self, ingress_port: int, frame: bytes) -> None: ...


@dataclass
class Undecodable:
    """What the request deserializers return for bytes that do not parse."""

    what: str
    error: str


def _decoder(message: Any) -> Callable[[bytes], Any]:
    """`message.FromString`, returning Undecodable instead of raising (gRPC would log the
    exception's traceback for every such request)."""

    def decode(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except Exception as e:  # DecodeError, or anything else protobuf raises
            return Undecodable(message.DESCRIPTOR.name, str(e) or type(e).__name__)

    return decode


def _read_decoder(data: bytes) -> Any:
    """A counter-cells ReadRequest parsed by hand (p4rt.wire.parse_counter_read), any other
    by protobuf."""
    try:
        return parse_counter_read(data)
    except Fallback:
        return _decoder(p4runtime_pb2.ReadRequest)(data)


class _Status(
    collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status
):
    pass


@dataclass
class _Config:
    p4info: p4info_pb2.P4Info
    device_config: bytes
    cookie: p4runtime_pb2.ForwardingPipelineConfig.Cookie | None
    binding: Binding


def _rpc(method: Callable) -> Callable:
    """Turn a P4RTError raised by a unary RPC into its gRPC status."""

    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            if isinstance(request, Undecodable):
                raise self.undecodable(request, context.peer())
            return method(self, request, context)
        except P4RTError as e:
            context.abort(e.code, e.message)

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


class P4RuntimeService(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(
        self,
        pipeline: Any,
        device_id: int,
        cpu_port: int,
        check_p4info: Callable[[p4info_pb2.P4Info], list[str]],
        max_streams: int = 32 - RESERVED_WORKERS,
        arbitration_timeout: float = ARBITRATION_TIMEOUT,
    ) -> None:
        self.pipeline = pipeline
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.check_p4info = check_p4info
        self.dataplane: Dataplane | None = None
        self.arbiter = Arbiter(device_id)
        self.lock = threading.Lock()
        self.config: _Config | None = None
        self.saved_uncommitted = False
        self.counts: collections.Counter[str] = collections.Counter()
        self.max_streams = max_streams
        self.arbitration_timeout = arbitration_timeout
        self._streams: set[Client] = set()
        self._streams_lock = threading.Lock()
        # Digests the pipeline emits (p4rt/digests.py), by the P4Info name of their struct.
        self.digests = DigestManager(self._send_digest)
        pipeline.digest_sink = self._learn

    def _learn(self, sample: tuple[int, ...]) -> None:
        self.digests.learn(DIGEST_SKETCH, sample)

    def _send_digest(self, msg: p4runtime_pb2.StreamMessageResponse) -> bool:
        primary = self.arbiter.primary("")
        if primary is None:
            return False
        primary.outbox.put(msg)
        return True

    # ------------------------------------------------------------------ helpers
    def undecodable(self, request: Undecodable, peer: str) -> P4RTError:
        """The error for a request that does not parse (what gRPC answers); logs one line."""
        self.counts["undecodable_requests"] += 1
        n = self.counts["undecodable_requests"]
        if n <= MAX_LOGGED_UNDECODABLE or n % 1000 == 0:
            log.warning(
                "undecodable %s from %s (%d so far): %s", request.what, peer, n, request.error
            )
        return P4RTError(grpc.StatusCode.INTERNAL, UNDECODABLE)

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise P4RTError(
                grpc.StatusCode.NOT_FOUND,
                f"unknown device id {device_id}: this switch is device {self.device_id}",
            )

    def _check_writer(self, request: Any) -> None:
        election = election_int(request.election_id) if request.HasField("election_id") else None
        self.arbiter.check_writer(request.role, election)

    def _binding(self) -> Binding:
        config = self.config
        if config is None:
            raise P4RTError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "no forwarding pipeline config set: call SetForwardingPipelineConfig first",
            )
        return config.binding

    def _verify(self, config: p4runtime_pb2.ForwardingPipelineConfig) -> _Config:
        problems = list(self.check_p4info(config.p4info))
        binding = None
        try:
            binding = bind(P4InfoIndex(config.p4info), self.pipeline)
        except BindingError as e:
            problems += [p for p in e.problems if p not in problems]
        if problems or binding is None:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise P4RTError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "P4Info does not fit the embedded hotagg pipeline: "
                + "; ".join(problems[:5])
                + more,
            )
        cookie = config.cookie if config.HasField("cookie") else None
        return _Config(config.p4info, config.p4_device_config, cookie, binding)

    # ------------------------------------------------------------------ unary RPCs
    @_rpc
    def Capabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    @_rpc
    def SetForwardingPipelineConfig(
        self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest, context: Any
    ) -> Any:
        self._check_device(request.device_id)
        self._check_writer(request)
        action = request.action
        if action == SetReq.COMMIT:
            if request.HasField("config"):
                raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT, "COMMIT takes no config")
            with self.lock:
                if not self.saved_uncommitted:
                    raise P4RTError(grpc.StatusCode.NOT_FOUND, "no saved config to commit")
                self.saved_uncommitted = False  # writes already went to the saved config
            return p4runtime_pb2.SetForwardingPipelineConfigResponse()
        if action == SetReq.UNSPECIFIED:
            raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT, "action is not set")
        if not request.HasField("config"):
            raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT, "config is missing")
        new = self._verify(request.config)
        if action == SetReq.VERIFY:
            return p4runtime_pb2.SetForwardingPipelineConfigResponse()
        with self.lock:
            if action == SetReq.VERIFY_AND_COMMIT:
                self.pipeline.reset()  # a new pipeline starts from empty tables and registers
            elif self.config is not None:  # the tables keep their entries and metadata
                new.binding.metadata = self.config.binding.metadata
            self.config = new
            self.digests.set_pipeline(new.binding.index)  # no digest configured, none pending
            self.saved_uncommitted = action == SetReq.VERIFY_AND_SAVE
        log.info("pipeline config set (%s)", SetReq.Action.Name(action))
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    @_rpc
    def GetForwardingPipelineConfig(
        self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest, context: Any
    ) -> Any:
        self._check_device(request.device_id)
        response = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        config = self.config
        if config is None:
            return response  # spec: the config field stays unset
        out = response.config
        out.SetInParent()  # set, even when it holds nothing (COOKIE_ONLY without a cookie)
        kind = request.response_type
        if kind in (GetReq.ALL, GetReq.P4INFO_AND_COOKIE):
            out.p4info.CopyFrom(config.p4info)
        if kind in (GetReq.ALL, GetReq.DEVICE_CONFIG_AND_COOKIE):
            out.p4_device_config = config.device_config
        if config.cookie is not None:
            out.cookie.CopyFrom(config.cookie)
        return response

    @_rpc
    def Write(
        self, request: bytes | p4runtime_pb2.WriteRequest, context: grpc.ServicerContext
    ) -> Any:
        """Takes the serialized request (as registered by P4RuntimeServer) or a message."""
        req = self._parse_write(request, context)
        self._check_device(req.device_id)
        self.arbiter.check_writer(req.role, req.election)
        binding = self._binding()
        if req.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
            raise P4RTError(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR is supported")
        results: list[P4RTError | None] = []
        with self.lock:
            for kind, entity in req.updates:
                try:
                    if not isinstance(entity, RawEntry) and entity.HasField("digest_entry"):
                        self.digests.write(kind, entity.digest_entry)
                    else:
                        write_update(binding, kind, entity)
                    results.append(None)
                except P4RTError as e:
                    results.append(e)
                except Exception as e:  # a bug must not abort the rest of the batch
                    log.exception("update failed unexpectedly")
                    results.append(P4RTError(grpc.StatusCode.INTERNAL, f"internal error: {e}"))
        if all(e is None for e in results):
            return p4runtime_pb2.WriteResponse()
        status = batch_status(results)  # within what clients accept (errors.py)
        context.abort_with_status(
            _Status(
                grpc.StatusCode.UNKNOWN,
                status.message,
                ((STATUS_DETAILS_KEY, status.SerializeToString()),),
            )
        )

    def _parse_write(self, request: bytes | p4runtime_pb2.WriteRequest, context: Any) -> WriteIn:
        if not isinstance(request, bytes):
            return write_in(request)
        try:
            return parse_write_request(request)
        except Fallback:
            pass
        message = _decoder(p4runtime_pb2.WriteRequest)(request)
        if isinstance(message, Undecodable):
            raise self.undecodable(message, context.peer())
        return write_in(message)

    def Read(self, request: p4runtime_pb2.ReadRequest, context: grpc.ServicerContext) -> Any:
        """Yields serialized ReadResponse messages (bytes), in bounded chunks."""
        try:
            if isinstance(request, Undecodable):
                raise self.undecodable(request, context.peer())
            self._check_device(request.device_id)
            binding = self._binding()
            found: list[Iterable[bytes]]
            with self.lock:  # a consistent snapshot; encoded and streamed after the lock
                if isinstance(request, CounterReadIn):
                    found = [read_counter(binding, cid, i) for cid, i in request.cells]
                else:
                    found = [
                        self.digests.read(ent.digest_entry)
                        if ent.HasField("digest_entry")
                        else read_entity(binding, ent)
                        for ent in request.entities
                    ]
        except P4RTError as e:
            context.abort(e.code, e.message)
        try:
            yield from chunks(itertools.chain.from_iterable(found))
        except P4RTError as e:  # a value that cannot be encoded: ends the stream
            context.abort(e.code, e.message)

    # ------------------------------------------------------------------ stream
    def _open_stream(self, client: Client) -> None:
        """Count a new stream in, or raise RESOURCE_EXHAUSTED (module docstring: caps)."""
        with self._streams_lock:
            waiting = sum(not c.registered for c in self._streams)
            if len(self._streams) >= self.max_streams:
                problem = f"too many open streams ({len(self._streams)})"
            elif waiting >= MAX_UNARBITRATED:
                problem = f"too many streams waiting for their arbitration ({waiting})"
            else:
                self._streams.add(client)
                return
        self.counts["streams_refused"] += 1
        log.warning("StreamChannel refused: %s", problem)
        raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{problem}: try again later")

    def StreamChannel(self, request_iterator: Iterator, context: grpc.ServicerContext) -> Any:
        client = Client(device_id=self.device_id)
        try:
            self._open_stream(client)
        except P4RTError as e:
            context.abort(e.code, e.message)
        context.add_callback(lambda: client.outbox.put(_CLOSED))
        reader = threading.Thread(
            target=self._read_stream, args=(request_iterator, client, context.peer()), daemon=True
        )
        reader.start()
        deadline = time.monotonic() + self.arbitration_timeout
        try:
            while True:
                try:  # until the stream has arbitrated, wait no longer than its deadline
                    wait = None if client.registered else max(0.0, deadline - time.monotonic())
                    item = client.outbox.get(timeout=wait)
                except queue.Empty:
                    if client.registered:
                        continue
                    self.counts["streams_timed_out"] += 1
                    log.warning(
                        "StreamChannel from %s closed: no arbitration within %g s",
                        context.peer(),
                        self.arbitration_timeout,
                    )
                    context.abort(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"no MasterArbitrationUpdate within {self.arbitration_timeout:g} s "
                        "of opening the stream: send one first",
                    )
                if item is _CLOSED:
                    return
                if isinstance(item, P4RTError):
                    context.abort(item.code, item.message)
                yield item
        finally:
            with self._streams_lock:
                self._streams.discard(client)
            self.arbiter.remove(client)

    def _read_stream(self, requests: Iterator, client: Client, peer: str) -> None:
        try:
            for req in requests:
                if isinstance(req, Undecodable):
                    raise self.undecodable(req, peer)
                which = req.WhichOneof("update")
                if which == "arbitration":
                    self._arbitrate(client, req.arbitration)
                elif which == "packet":
                    self._packet_out(client, req.packet)
                elif which == "digest_ack":
                    self.digests.ack(req.digest_ack.digest_id, req.digest_ack.list_id)
        except P4RTError as e:
            client.outbox.put(e)
        except grpc.RpcError:
            pass  # the client went away
        except Exception:
            log.exception("stream reader failed")
        client.outbox.put(_CLOSED)

    def _arbitrate(self, client: Client, arb: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        if arb.device_id != self.device_id:
            if client.registered:
                raise P4RTError(
                    grpc.StatusCode.FAILED_PRECONDITION, "the device id of a stream cannot change"
                )
            self._check_device(arb.device_id)
        role = arb.role.name if arb.HasField("role") else ""
        self.arbiter.arbitrate(client, role, election_int(arb.election_id))

    def _stream_error(self, client: Client, code: grpc.StatusCode, message: str) -> None:
        msg = p4runtime_pb2.StreamMessageResponse()
        msg.error.canonical_code = code.value[0]
        msg.error.message = message
        msg.error.packet_out.SetInParent()
        client.outbox.put(msg)

    def _packet_out(self, client: Client, packet: p4runtime_pb2.PacketOut) -> None:
        if not client.registered or self.arbiter.primary(client.role) is not client:
            self.counts["packet_out_not_primary"] += 1
            self._stream_error(client, grpc.StatusCode.PERMISSION_DENIED, "not primary")
            return
        config = self.config
        if config is None or not config.binding.packet_out:
            self.counts["packet_out_no_config"] += 1
            self._stream_error(client, grpc.StatusCode.FAILED_PRECONDITION, "no pipeline set")
            return
        fields = config.binding.packet_out
        widths = dict(fields)
        values = {}
        try:
            for m in packet.metadata:
                if m.metadata_id not in widths:
                    raise P4RTError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"packet_out has no metadata id {m.metadata_id}",
                    )
                what = f"packet_out metadata {m.metadata_id}"
                values[m.metadata_id] = decode(m.value, widths[m.metadata_id], what)
        except P4RTError as e:
            self.counts["packet_out_bad_metadata"] += 1
            self._stream_error(client, e.code, e.message)
            return
        dataplane = self.dataplane
        if dataplane is None:
            self.counts["packet_out_no_dataplane"] += 1
            return
        self.counts["packet_out"] += 1
        dataplane.inject(self.cpu_port, pack_header(fields, values) + packet.payload)

    def packet_in(self, data: bytes) -> None:
        """A frame the pipeline sent to the CPU port (packet_in header first) -> PacketIn."""
        config = self.config
        primary = self.arbiter.primary("")
        fields = config.binding.packet_in if config is not None else []
        n = header_len(fields)
        if primary is None or not fields or len(data) < n:
            self.counts["packet_in_dropped"] += 1
            return
        if primary.outbox.qsize() >= MAX_QUEUED_PACKET_INS:
            primary.packet_ins_dropped += 1
            self.counts["packet_in_dropped"] += 1
            return
        msg = p4runtime_pb2.StreamMessageResponse()
        msg.packet.payload = data[n:]
        for mid, value in unpack_header(fields, data):
            msg.packet.metadata.add(metadata_id=mid, value=encode(value))
        self.counts["packet_in"] += 1
        primary.outbox.put(msg)


def _handlers(service: P4RuntimeService) -> grpc.GenericRpcHandler:
    """The generated servicer's handlers, except that Write receives the request bytes and
    Read sends response bytes (see the module docstring)."""
    pb = p4runtime_pb2

    def unary(method: Callable, request: Any, response: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            method, _decoder(request), response.SerializeToString
        )

    handlers = {
        "Write": grpc.unary_unary_rpc_method_handler(
            service.Write, None, pb.WriteResponse.SerializeToString
        ),
        "Read": grpc.unary_stream_rpc_method_handler(service.Read, _read_decoder, None),
        "SetForwardingPipelineConfig": unary(
            service.SetForwardingPipelineConfig,
            pb.SetForwardingPipelineConfigRequest,
            pb.SetForwardingPipelineConfigResponse,
        ),
        "GetForwardingPipelineConfig": unary(
            service.GetForwardingPipelineConfig,
            pb.GetForwardingPipelineConfigRequest,
            pb.GetForwardingPipelineConfigResponse,
        ),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            service.StreamChannel,
            _decoder(pb.StreamMessageRequest),
            pb.StreamMessageResponse.SerializeToString,
        ),
        "Capabilities": unary(
            service.Capabilities, pb.CapabilitiesRequest, pb.CapabilitiesResponse
        ),
    }
    return grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers)


def probe_bind(address: str) -> None:
    """Raise ServerStartError if `address` (HOST:PORT) cannot be bound, with the reason.

    gRPC's own bind failure only says "failed to add port" (and logs to stderr), so the
    address is tried with a plain socket first.
    """
    host, _, port_s = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port_s), type=socket.SOCK_STREAM)
    except (OSError, ValueError) as e:
        raise ServerStartError(f"cannot serve P4Runtime on {address}: {e}") from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
            try:
                s.bind(sockaddr)
            except OSError as e:
                reason = "the port is in use" if e.errno == errno.EADDRINUSE else e.strerror
                raise ServerStartError(f"cannot serve P4Runtime on {address}: {reason}") from None


def _default_checker() -> Callable[[p4info_pb2.P4Info], list[str]]:
    from softswitch.schema import check_p4info

    return check_p4info


class P4RuntimeServer:
    """The gRPC server around a P4RuntimeService; `start()` returns the bound TCP port."""

    def __init__(
        self,
        pipeline: Any,
        *,
        device_id: int = 0,
        cpu_port: int = CPU_PORT,
        address: str = "127.0.0.1:0",
        check_p4info: Callable[[p4info_pb2.P4Info], list[str]] | None = None,
        max_workers: int = 32,
        arbitration_timeout: float = ARBITRATION_TIMEOUT,
    ) -> None:
        if max_workers <= RESERVED_WORKERS:
            raise ValueError(f"max_workers must exceed {RESERVED_WORKERS}")
        self.address = address
        self.max_workers = max_workers
        self.service = P4RuntimeService(
            pipeline,
            device_id,
            cpu_port,
            check_p4info or _default_checker(),
            max_streams=max_workers - RESERVED_WORKERS,
            arbitration_timeout=arbitration_timeout,
        )
        self.port = 0
        self._server: grpc.Server | None = None

    def start(self) -> int:
        probe_bind(self.address)
        server = grpc.server(
            futures.ThreadPoolExecutor(self.max_workers, thread_name_prefix="p4rt"),
            # without this, gRPC shares a port with another process (SO_REUSEPORT)
            options=[("grpc.so_reuseport", 0)],
        )
        server.add_generic_rpc_handlers((_handlers(self.service),))
        try:
            port = server.add_insecure_port(self.address)
        except RuntimeError as e:
            port = 0
            log.debug("bind failed: %s", e)
        if not port:
            raise ServerStartError(
                f"cannot serve P4Runtime on {self.address}: the port is in use "
                "or the address is not local"
            )
        server.start()
        self._server = server
        self.port = port
        return port

    def attach_dataplane(self, dataplane: Dataplane) -> None:
        self.service.dataplane = dataplane

    def packet_in(self, data: bytes) -> None:
        self.service.packet_in(data)

    def stop(self, grace: float | None = 1.0) -> None:
        self.service.digests.stop()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
