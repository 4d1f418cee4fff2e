/*
 * hotagg: IPv4 routing, CPU port and replies (fragment of HotaggIngress).
 *
 * Included inside `control HotaggIngress` so tables and actions keep the P4Info names of
 * docs/design.md (HotaggIngress.ipv4_lpm, ...); the macros expand in its apply block.
 */
#ifndef HOTAGG_FORWARDING_P4
#define HOTAGG_FORWARDING_P4

    // Scratch for swapping addresses and ports in replies.
    ipv4_addr_t swap_addr;
    l4_port_t swap_port;

    // The switch answers from the MAC address the frame was sent to.
    @id(HOTAGG_ID_ACTION_IPV4_FORWARD)
    action ipv4_forward(mac_addr_t dst_mac, port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    @id(HOTAGG_ID_ACTION_SEND_TO_CPU)
    action send_to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = standard_metadata.ingress_port;
        hdr.packet_in._pad = 0;
    }

    @id(HOTAGG_ID_ACTION_DROP)
    action drop() {
        mark_to_drop(standard_metadata);
    }

    @id(HOTAGG_ID_TABLE_IPV4_LPM)
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

// Ingress step 1: a PacketOut leaves by the port the controller chose, without its header
// and otherwise unchanged. One sent back to the CPU port returns as a PacketIn from it.
#define HOTAGG_PACKET_OUT()                                                            \
    {                                                                                  \
        standard_metadata.egress_spec = hdr.packet_out.egress_port;                    \
        if (hdr.packet_out.egress_port == CPU_PORT) {                                  \
            HOTAGG_PACKET_IN();                                                        \
        }                                                                              \
        hdr.packet_out.setInvalid();                                                   \
    }

// Every frame that leaves by CPU_PORT reaches the controller as a PacketIn, so it carries
// packet_in (send_to_cpu, a PacketOut to CPU_PORT, or an ipv4_forward route to CPU_PORT).
#define HOTAGG_PACKET_IN()                                                             \
    {                                                                                  \
        hdr.packet_in.setValid();                                                      \
        hdr.packet_in.ingress_port = standard_metadata.ingress_port;                   \
        hdr.packet_in._pad = 0;                                                        \
    }

// Turn a request into the switch's reply REPLY_OP: mark it, swap IPv4 addresses and UDP
// ports; ipv4_lpm then routes it back to the sender.
#define HOTAGG_MAKE_REPLY(REPLY_OP)                                                    \
    {                                                                                  \
        hdr.hotagg.op = REPLY_OP;                                                      \
        hdr.hotagg.flags = hdr.hotagg.flags | FLAG_FROM_SWITCH;                        \
        swap_addr = hdr.ipv4.srcAddr;                                                  \
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;                                           \
        hdr.ipv4.dstAddr = swap_addr;                                                  \
        swap_port = hdr.udp.srcPort;                                                   \
        hdr.udp.srcPort = hdr.udp.dstPort;                                             \
        hdr.udp.dstPort = swap_port;                                                   \
    }

#endif  /* HOTAGG_FORWARDING_P4 */
