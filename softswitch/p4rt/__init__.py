"""P4Runtime server of the embedded switch, split by concern. The messages, byte strings and
P4Info lookups it shares with the controller are in the top-level p4rt/ package.

- codec: controller packet headers (packet_in / packet_out)
- binding: P4Info ids -> the pipeline's tables, actions, counters, registers
- entities: Write/Read of table entries, counters, direct counters, registers
- digests: DigestEntry configuration, DigestList delivery and acks
- arbitration: primary/backup election over StreamChannel
- errors: state errors -> status codes, a failed Write batch's status
- server: the gRPC service, pipeline config and packet I/O
"""

from softswitch.p4rt.server import P4RuntimeServer, ServerStartError

__all__ = ["P4RuntimeServer", "ServerStartError"]
