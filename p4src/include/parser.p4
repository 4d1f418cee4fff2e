/*
 * hotagg: parser and deparser.
 */
#ifndef HOTAGG_PARSER_P4
#define HOTAGG_PARSER_P4

parser HotaggParser(packet_in packet,
                    out headers_t hdr,
                    inout local_metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }

    // A PacketOut is parsed like any frame, but ingress only strips this header and sends
    // the rest out unchanged (docs/design.md §2, step 1); only the IPv4 checksum of an IPv4
    // frame is recomputed on the way out, as on every packet that leaves.
    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    // IPv4 with options or another protocol is only routed.
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (IPV4_IHL_NO_OPTIONS, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    // The hotagg header is parsed for requests (destination port 18497) and replies (source
    // port 18497): ingress checks the form of both, and where a reply to a worker comes from.
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort, hdr.udp.srcPort) {
            (HOTAGG_PORT, _): parse_hotagg;
            (_, HOTAGG_PORT): parse_reply;
            default: accept;
        }
    }

    // A reply is only checked and routed, never changed: its entries stay payload (ingress
    // checks from packet_length that they are all there). Extracting and emitting 8 entries
    // would add about two thirds to BMv2's cost of a reply (callgrind, simple_switch_grpc,
    // 2026-12-03: 1.63 M against 0.99 M instructions per 8-entry PULL_REPLY).
    state parse_reply {
        packet.extract(hdr.hotagg);
        verify(hdr.hotagg.count <= MAX_ENTRIES, error.HotaggTooManyEntries);
        transition accept;
    }

    state parse_hotagg {
        packet.extract(hdr.hotagg);
        verify(hdr.hotagg.count <= MAX_ENTRIES, error.HotaggTooManyEntries);
        meta.entries_left = hdr.hotagg.count;
        transition select(meta.entries_left) {
            0: accept;
            default: parse_entry;
        }
    }

    // Runs count times (<= MAX_ENTRIES by the verify above). A truncated entry ends the
    // parse with error.PacketTooShort, which ingress counts as MALFORMED.
    state parse_entry {
        packet.extract(hdr.entries.next);
        meta.entries_left = meta.entries_left - 1;
        transition select(meta.entries_left) {
            0: accept;
            default: parse_entry;
        }
    }
}

control HotaggDeparser(packet_out packet, in headers_t hdr) {
    apply {
        // emit() skips invalid headers: packet_in only exists on frames to the CPU port,
        // removed entries are invalid stack elements. packet_out is never emitted.
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.hotagg);
        packet.emit(hdr.entries);
    }
}

#endif  /* HOTAGG_PARSER_P4 */
