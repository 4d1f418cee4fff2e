/*
 * hotagg: checksum controls.
 */
#ifndef HOTAGG_CHECKSUM_P4
#define HOTAGG_CHECKSUM_P4

// Nothing is verified: a bad IPv4 checksum is not the switch's concern here (the embedded
// target does not verify either), and the header checksum is rewritten on the way out.
control HotaggVerifyChecksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply { }
}

// The IPv4 header checksum is recomputed on every packet that leaves with a parsed IPv4
// header (routing decrements ttl; replies swap addresses). It covers the 20-byte header only
// (docs/design.md §2, ingress step 7). UDP checksums are not recomputed: the switch writes 0
// on the switch ops it processes and leaves every other packet's UDP checksum as it came.
control HotaggComputeChecksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.diffserv,
              hdr.ipv4.totalLen,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.fragOffset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.srcAddr,
              hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

#endif  /* HOTAGG_CHECKSUM_P4 */
