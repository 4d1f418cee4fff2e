/*
 * hotagg: statistics and the drop helper (fragment of HotaggIngress).
 *
 * Included inside `control HotaggIngress` so the counter's P4Info name is
 * HotaggIngress.stats; the macros below expand to statements in its apply block.
 */
#ifndef HOTAGG_STATS_P4
#define HOTAGG_STATS_P4

    // One cell per reason (STAT_* in types.p4). BMv2 counts the packet's length as
    // received, the same number the embedded target counts.
    @id(HOTAGG_ID_COUNTER_STATS)
    counter(STATS_SIZE, CounterType.packets_and_bytes) stats;

    // Set once the packet is marked to drop; nothing later may set egress_spec again,
    // or BMv2 forwards the packet after all (p4lang/behavioral-model#677).
    bool dropped;

// Count REASON and drop the packet.
#define HOTAGG_DROP(REASON)                                                            \
    {                                                                                  \
        stats.count(REASON);                                                           \
        mark_to_drop(standard_metadata);                                               \
        dropped = true;                                                                \
    }

#endif  /* HOTAGG_STATS_P4 */
