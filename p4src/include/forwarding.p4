/*
 * hotagg: IPv4 routing and the controller's port.
 *
 * Forwarding owns ipv4_lpm and its actions; @name(".HotaggIngress.<name>") keeps their
 * P4Info names those of docs/design.md §2 while they are declared in this control.
 */
#ifndef HOTAGG_FORWARDING_P4
#define HOTAGG_FORWARDING_P4

// Every frame that leaves by CPU_PORT reaches the controller as a PacketIn, so it carries
// packet_in (send_to_cpu, a PacketOut to CPU_PORT, or an ipv4_forward route to CPU_PORT).
// Stateless, so it may be instantiated wherever a frame is sent to the CPU port.
control ToController(inout packet_in_header_t to_cpu, in port_t ingress_port) {
    apply {
        to_cpu.setValid();
        to_cpu.ingress_port = ingress_port;
        to_cpu._pad = 0;
    }
}

// Ingress step 1: a PacketOut leaves by the port the controller chose, without its header
// and otherwise unchanged. One sent back to the CPU port returns as a PacketIn from it.
control FromController(inout headers_t hdr, inout standard_metadata_t standard_metadata) {
    ToController() to_controller;

    apply {
        standard_metadata.egress_spec = hdr.packet_out.egress_port;
        if (hdr.packet_out.egress_port == CPU_PORT) {
            to_controller.apply(hdr.packet_in, standard_metadata.ingress_port);
        }
        hdr.packet_out.setInvalid();
    }
}

// Ingress step 7: route on the (possibly swapped) destination. A hotagg packet without a
// route counts NO_ROUTE. ipv4_forward never sends a packet on with TTL 0: one that came with
// TTL 0 or 1 is dropped and counted TTL_EXPIRED instead (hotagg or not; no ICMP time
// exceeded). send_to_cpu neither checks nor decrements the TTL: the controller takes the
// packet as it came, as a router's CPU takes one addressed to it.
control Forwarding(inout headers_t hdr,
                   in bool is_hotagg,
                   inout standard_metadata_t standard_metadata)(counter stats) {
    ToController() to_controller;

    // The switch answers from the MAC address the frame was sent to.
    @name(".HotaggIngress.ipv4_forward") @id(HOTAGG_ID_ACTION_IPV4_FORWARD)
    action ipv4_forward(mac_addr_t dst_mac, port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    @name(".HotaggIngress.send_to_cpu") @id(HOTAGG_ID_ACTION_SEND_TO_CPU)
    action send_to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = standard_metadata.ingress_port;
        hdr.packet_in._pad = 0;
    }

    @name(".HotaggIngress.drop") @id(HOTAGG_ID_ACTION_DROP)
    action drop() {
        mark_to_drop(standard_metadata);
    }

    @name(".HotaggIngress.ipv4_lpm") @id(HOTAGG_ID_TABLE_IPV4_LPM)
    table ipv4_lpm {
        key = {
            hdr.ipv4.dstAddr : lpm @name("dst_addr");
        }
        actions = {
            ipv4_forward;
            send_to_cpu;
            drop;
        }
        default_action = drop();
        size = IPV4_LPM_SIZE;
    }

    apply {
        // The TTL the packet came with: ipv4_forward decrements it (wrapping 0 to 255 on a
        // packet dropped just below).
        bit<8> ttl_in = hdr.ipv4.ttl;
        switch (ipv4_lpm.apply().action_run) {
            ipv4_forward: {
                if (ttl_in <= 1) {
                    mark_to_drop(standard_metadata);
                    stats.count(STAT_TTL_EXPIRED);
                } else if (standard_metadata.egress_spec == CPU_PORT) {
                    // A route out of CPU_PORT is a PacketIn too.
                    to_controller.apply(hdr.packet_in, standard_metadata.ingress_port);
                }
            }
            drop: {
                if (is_hotagg) {
                    stats.count(STAT_NO_ROUTE);
                }
            }
        }
    }
}

#endif  /* HOTAGG_FORWARDING_P4 */
