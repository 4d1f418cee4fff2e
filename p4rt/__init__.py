"""P4Runtime messages and the P4Info index, shared by the controller and the embedded target.

The controller (controller/) and the embedded switch's server (softswitch/p4rt/) are the two
ends of the same P4Runtime messages, so each message's encoding and decoding is written once,
here, and each end uses the half it sends and the half it receives. protobuf is held to its
pure-Python implementation (3.20, pinned by p4runtime-shell 0.0.6), which needs ~100 us per
table entry, so the messages on the bulk paths (writes of table entries, reads of tables and
counters) are written and read as bytes directly, a few us each; anything else is left to
protobuf, and every hand-written decoder hands what it does not read to protobuf (`Fallback`),
so both readings agree. The P4Info index is the one place that looks P4Info objects up by
name or id and compares two P4Infos. This package imports no other project package except
contract/.

- proto: protobuf's wire format (varints, fields, a strict field scanner)
- bytestrings: P4Runtime's canonical byte strings <-> ints
- wire: the P4Runtime messages, encoders and decoders
- p4info: the P4Info index and the comparison of two P4Infos
- errors: P4RTError, a request refused with a gRPC status code
"""
