"""The struct codec (contract/codec.py) against the Scapy layers (contract/layers.py), byte
for byte."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from contract.codec import (
    HEADER,
    CodecError,
    Message,
    decode,
    decode_frame,
    encode,
    encode_frame,
    encode_message,
    ipv4_checksum,
    pack_entries,
    unpack_entries,
)
from contract.constants import (
    ENTRY_LEN,
    HEADER_LEN,
    HOTAGG_PORT,
    INT32_MAX,
    INT32_MIN,
    KEY_MAX,
    MAX_ENTRIES,
    Op,
)
from contract.layers import Entry, Hotagg

EDGE_KEYS = (0, 1, KEY_MAX, KEY_MAX - 1, 1 << 63)
EDGE_VALUES = (0, 1, -1, INT32_MIN, INT32_MAX)


def random_message(rng: random.Random) -> Message:
    count = rng.randint(0, MAX_ENTRIES)
    keys = tuple(
        rng.choice(EDGE_KEYS) if rng.random() < 0.2 else rng.getrandbits(64) for _ in range(count)
    )
    values = tuple(
        rng.choice(EDGE_VALUES) if rng.random() < 0.2 else rng.randint(INT32_MIN, INT32_MAX)
        for _ in range(count)
    )
    return Message(
        op=rng.choice([*list(Op), 0, 12, 255]),
        flags=rng.getrandbits(8),
        job_id=rng.getrandbits(16),
        worker_id=rng.getrandbits(16),
        seq=rng.choice([0, 1, (1 << 32) - 1, rng.getrandbits(32)]),
        iteration=rng.choice([0, 1, (1 << 32) - 1, rng.getrandbits(32)]),
        mask=rng.getrandbits(8),
        keys=keys,
        values=values,
        cached=rng.getrandbits(8),
        aux=rng.choice([0, 1, 0xFFFF, rng.getrandbits(16)]),
    )


def scapy_of(m: Message) -> Hotagg:
    return Hotagg(
        version=m.version,
        op=m.op,
        flags=m.flags,
        job_id=m.job_id,
        worker_id=m.worker_id,
        seq=m.seq,
        iteration=m.iteration,
        mask=m.mask,
        cached=m.cached,
        aux=m.aux,
        entries=[Entry(key=k, value=v) for k, v in zip(m.keys, m.values)],
    )


def assert_same(m: Message, s: Hotagg) -> None:
    assert (s.version, s.op, s.flags, s.count) == (m.version, m.op, m.flags, m.count)
    assert (s.job_id, s.worker_id, s.seq, s.iteration, s.mask, s.cached, s.aux) == (
        m.job_id,
        m.worker_id,
        m.seq,
        m.iteration,
        m.mask,
        m.cached,
        m.aux,
    )
    assert [(e.key, e.value) for e in s.entries] == list(zip(m.keys, m.values))


def test_randomized_codec_matches_scapy_both_ways() -> None:
    rng = random.Random(20240601)
    for _ in range(2000):
        m = random_message(rng)
        ours = encode_message(m)
        theirs = bytes(scapy_of(m))
        assert ours == theirs
        assert len(ours) == HEADER_LEN + ENTRY_LEN * m.count
        assert decode(theirs) == m
        assert_same(m, Hotagg(ours))


@pytest.mark.parametrize("op", list(Op))
@pytest.mark.parametrize("count", range(MAX_ENTRIES + 1))
def test_every_op_and_count_with_edge_values(op: Op, count: int) -> None:
    keys = tuple(EDGE_KEYS[i % len(EDGE_KEYS)] for i in range(count))
    values = tuple(EDGE_VALUES[(i + 1) % len(EDGE_VALUES)] for i in range(count))
    full = (1 << count) - 1
    m = Message(op, 0x07, 0xFFFF, 63, 1, 0xFFFFFFFF, full, keys, values, cached=full ^ 0xFF)
    data = encode_message(m)
    assert data == bytes(scapy_of(m))
    assert decode(data) == m
    assert_same(m, Hotagg(data))


def test_values_none_means_zero_and_numpy_inputs_accepted() -> None:
    keys = np.array([5, KEY_MAX], dtype=np.uint64)
    assert encode(Op.PULL, 1, 2, 3, 4, keys) == encode(Op.PULL, 1, 2, 3, 4, (5, KEY_MAX), (0, 0))
    vals = np.array([INT32_MIN, INT32_MAX], dtype=np.int32)
    m = decode(encode(Op.PUSH, 1, 2, 3, 4, keys, vals))
    assert m.keys == (5, KEY_MAX) and m.values == (INT32_MIN, INT32_MAX)


def test_cached_and_aux_survive_a_round_trip() -> None:
    s = Hotagg(op=Op.FLUSH, seq=1, cached=0x5A, aux=0xABCD, entries=[Entry(key=1, value=2)])
    m = decode(bytes(s))
    assert m.keys == (1,) and m.values == (2,) and m.cached == 0x5A and m.aux == 0xABCD
    assert encode_message(m) == bytes(s)


def test_cached_is_the_byte_after_mask_and_aux_the_last_two() -> None:
    """Byte 16 mask, 17 cached, 18-19 aux (big endian): the P4 header and the switch rely
    on it."""
    data = encode(Op.COLLECT_REPLY, 1, 0, 1, 1, [7], [9], mask=0x81, cached=0x3C, aux=0x1234)
    assert data[16:20] == bytes([0x81, 0x3C, 0x12, 0x34])
    assert Hotagg(data).cached == 0x3C and decode(data).cached == 0x3C
    assert Hotagg(data).aux == 0x1234 and decode(data).aux == 0x1234
    assert encode(Op.PUSH, 1, 0, 1, 1)[17:20] == bytes(3)  # cached and aux default to 0


def test_pack_entries_matches_struct_encoding() -> None:
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 2**63, size=37, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    values = rng.integers(INT32_MIN, INT32_MAX, size=37, endpoint=True)
    blob = pack_entries(keys, values)
    for i in range(0, 37, MAX_ENTRIES):
        k, v = keys[i : i + MAX_ENTRIES], values[i : i + MAX_ENTRIES]
        single = encode(Op.PUSH, 0, 0, 1, 1, k, v)[HEADER_LEN:]
        assert blob[i * ENTRY_LEN : (i + len(k)) * ENTRY_LEN] == single
    arr = unpack_entries(blob, 37, offset=0)
    assert np.array_equal(arr["key"], keys) and np.array_equal(arr["value"], values)
    with pytest.raises(CodecError):
        pack_entries([1], [1 << 31])
    with pytest.raises(CodecError):
        pack_entries([1, 2], [1])


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "short"),
        (bytes(HEADER_LEN - 1), "short"),
        (HEADER.pack(1, 1, 0, 9, 0, 0, 1, 1, 0, 0, 0) + bytes(12 * 9), "count 9"),
        (HEADER.pack(1, 1, 0, 2, 0, 0, 1, 1, 0, 0, 0) + bytes(12), "truncated"),
        (HEADER.pack(2, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0), "version 2"),
        (HEADER.pack(0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0), "version 0"),
        (HEADER.pack(1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0) + bytes(13), "length"),
        (HEADER.pack(1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0) + b"x", "length"),
    ],
)
def test_malformed_input_raises_codec_error(data: bytes, why: str) -> None:
    with pytest.raises(CodecError):
        decode(data)


def test_random_garbage_never_escapes_as_another_exception() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        data = rng.randbytes(rng.randint(0, 140))
        if rng.random() < 0.5 and len(data) >= 4:  # make some look plausible
            data = bytes([1, data[1], data[2], rng.randint(0, 10)]) + data[4:]
        try:
            m = decode(data)
        except CodecError:
            continue
        assert encode_message(m)[:18] == data[:18] and len(data) == HEADER_LEN + 12 * m.count


@pytest.mark.parametrize(
    "kwargs",
    [
        {"keys": [1] * (MAX_ENTRIES + 1)},
        {"keys": [1, 2], "values": [1]},
        {"keys": [1 << 64]},
        {"keys": [-1]},
        {"keys": [1], "values": [1 << 31]},
        {"job_id": 1 << 16},
        {"seq": -1},
        {"op": 256},
        {"cached": 256},
        {"cached": -1},
    ],
)
def test_encode_rejects_fields_that_do_not_fit(kwargs: dict) -> None:
    args = {"op": Op.PUSH, "job_id": 1, "worker_id": 0, "seq": 1, "iteration": 1}
    args.update(kwargs)
    with pytest.raises(CodecError):
        encode(**args)


def test_frames_match_scapy_and_parse_both_ways() -> None:
    rng = random.Random(99)
    for _ in range(300):
        m = random_message(rng)
        payload = encode_message(m)
        src_mac = ":".join(f"{rng.getrandbits(8):02x}" for _ in range(6))
        dst_mac = ":".join(f"{rng.getrandbits(8):02x}" for _ in range(6))
        src_ip = ".".join(str(rng.getrandbits(8)) for _ in range(4))
        dst_ip = ".".join(str(rng.getrandbits(8)) for _ in range(4))
        sport = rng.getrandbits(16)
        ttl, ip_id, tos = rng.randint(1, 255), rng.getrandbits(16), rng.getrandbits(8)
        dport = HOTAGG_PORT if rng.random() < 0.8 else rng.getrandbits(16)
        ours = encode_frame(
            payload,
            src_mac=src_mac,
            dst_mac=dst_mac,
            src_ip=src_ip,
            dst_ip=dst_ip,
            sport=sport,
            dport=dport,
            ttl=ttl,
            ip_id=ip_id,
            tos=tos,
        )
        theirs = (
            Ether(src=src_mac, dst=dst_mac)
            / IP(src=src_ip, dst=dst_ip, ttl=ttl, id=ip_id, tos=tos)
            / UDP(sport=sport, dport=dport, chksum=0)
            / payload
        )
        assert ours == bytes(theirs)
        parsed = Ether(ours)
        assert parsed[IP].chksum == ipv4_checksum(
            bytes(theirs[IP])[:10] + b"\0\0" + bytes(theirs[IP])[12:20]
        )
        f = decode_frame(bytes(theirs) + bytes(rng.randint(0, 4)))  # Ethernet padding is ignored
        assert (f.src_mac, f.dst_mac, f.src_ip, f.dst_ip) == (src_mac, dst_mac, src_ip, dst_ip)
        assert (f.ttl, f.sport, f.dport, f.payload) == (ttl, sport, dport, payload)
        if dport == HOTAGG_PORT:
            assert_same(m, parsed[Hotagg])


def test_ipv4_checksum_verifies_to_zero() -> None:
    frame = encode_frame(
        encode(Op.PUSH, 1, 0, 1, 1, [3], [4]),
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="10.0.0.1",
        dst_ip="10.0.0.2",
        sport=40000,
    )
    ip = frame[14:34]
    assert ipv4_checksum(ip) == 0  # a correct header sums to 0xffff, complemented 0


@pytest.mark.parametrize(
    "mutate",
    [
        lambda f: f[:40],
        lambda f: f[:12] + b"\x86\xdd" + f[14:],
        lambda f: f[:14] + b"\x46" + f[15:],
        lambda f: f[:23] + b"\x06" + f[24:],
        lambda f: f[:16] + b"\xff\xff" + f[18:],
        lambda f: f[:38] + b"\x00\x09" + f[40:],
    ],
)
def test_decode_frame_rejects_malformed(mutate) -> None:
    frame = encode_frame(
        encode(Op.PULL, 1, 0, 1, 1, [3]),
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="10.0.0.1",
        dst_ip="10.0.0.2",
        sport=40000,
    )
    with pytest.raises(CodecError):
        decode_frame(mutate(frame))


def test_encode_frame_rejects_bad_addresses() -> None:
    base = {"src_mac": "02:00:00:00:00:01", "dst_mac": "02:00:00:00:00:02"}
    with pytest.raises(CodecError):
        encode_frame(b"", **base, src_ip="10.0.0.256", dst_ip="10.0.0.1", sport=1)
    with pytest.raises(CodecError):
        encode_frame(b"", src_mac="02:00", dst_mac="x", src_ip="1.1.1.1", dst_ip="1.1.1.1", sport=1)
