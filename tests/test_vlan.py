"""VLAN-tagged frames on a real veth pair, on every target (the `sut` fixture).

docs/design.md section 2 step 2: a frame that is not IPv4 is dropped without a stat, and a
tagged frame's etherType is the tag's TPID (0x8100, 0x88a8), so a tagged hotagg PUSH is
dropped and aggregates nothing. The receiving kernel strips the tag before a packet socket
sees it; BMv2 gets it back from libpcap, the embedded target from PACKET_AUXDATA
(softswitch/runtime.py). A raw-socket send keeps the tag in the frame on the wire.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

from contract.constants import MAX_ENTRIES, Op, Stat
from tests.packet_harness import frame, plain_udp
from tests.test_packets import collect

pytestmark = [pytest.mark.root]

JOB = 1
W1, PS = 1, 3
HOT = {key: key for key in range(MAX_ENTRIES)}


def tagged(data: bytes, *tags) -> bytes:
    """`data` (an Ethernet frame) with the given Dot1Q/Dot1AD layers after the MACs."""
    eth = Ether(data)
    inner = eth.payload
    outer = Ether(src=eth.src, dst=eth.dst)
    for tag in tags:
        outer = outer / tag
    return bytes(outer / inner)


def all_hot_push(seq: int) -> bytes:
    entries = [(key, 1) for key in HOT]
    return frame(W1, PS, Op.PUSH, entries, seq=seq, iteration=1, job_id=JOB, worker_id=0)


@pytest.mark.parametrize(
    "tags",
    [
        pytest.param(lambda: [Dot1Q(vlan=5)], id="802.1Q"),
        pytest.param(lambda: [Dot1Q(vlan=0, prio=3)], id="priority-tag"),
        pytest.param(lambda: [Dot1AD(vlan=7), Dot1Q(vlan=5)], id="802.1ad-QinQ"),
    ],
)
def test_tagged_push_is_dropped_and_not_aggregated(sut, tags):
    sut.hot(JOB, HOT)
    before = sut.stats()
    assert sut.ports.exchange(W1, tagged(all_hot_push(1), *tags())) == []
    # a tagged plain UDP frame is not routed either
    assert sut.ports.exchange(W1, tagged(plain_udp(W1, PS), *tags())) == []
    assert sut.stats() == before  # no stat at all: not PUSH, not MALFORMED
    # the same push untagged is a valid all-hot push: acked, and only it was summed
    out = sut.ports.exchange(W1, all_hot_push(1))
    assert [o.port for o in out] == [W1] and out[0].agg.op == Op.PUSH_ACK
    after = sut.stats()
    assert after[Stat.PUSH] - before[Stat.PUSH] == 1
    assert after[Stat.HOT_APPLIED] - before[Stat.HOT_APPLIED] == MAX_ENTRIES
    assert collect(sut, 1, HOT.values(), JOB) == {key: 1 for key in HOT}


def test_untagged_frames_still_flow_after_tagged_ones(sut):
    """Tagged and untagged frames of one port share the loop without starving each other."""
    for seq in range(1, 4):
        sut.ports.send(W1, tagged(all_hot_push(seq), Dot1Q(vlan=9)))
    out = sut.ports.exchange(W1, plain_udp(W1, PS, b"after"))
    assert [o.port for o in out] == [PS] and out[0].pkt[IP][UDP].load == b"after"
