"""P4Runtime server of the embedded switch, split by concern.

- codec: P4Runtime byte strings <-> ints, controller packet headers
- binding: P4Info ids -> the pipeline's tables, actions, counters, registers
- entities: Write/Read of table entries, counters, direct counters, registers
- arbitration: primary/backup election over StreamChannel
- server: the gRPC service, pipeline config and packet I/O
"""

from softswitch.p4rt.errors import P4RTError
from softswitch.p4rt.server import P4RuntimeServer, ServerStartError

__all__ = ["P4RTError", "P4RuntimeServer", "ServerStartError"]
