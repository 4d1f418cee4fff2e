/*
 * hotagg: data-plane loss simulator (fragment of HotaggIngress), as SwitchML's: loss for
 * tests and experiments where tc netem is unavailable.
 *
 * Included inside `control HotaggIngress` (P4Info names HotaggIngress.drop_sim, ...).
 */
#ifndef HOTAGG_DROP_SIM_P4
#define HOTAGG_DROP_SIM_P4

    // Drop probability * DROP_SCALE, from the drop_sim default action; and the draw.
    bit<32> drop_rate;
    bit<32> drop_draw;

    // rate = drop probability * 65536; 0 never drops, 65536 drops every hotagg packet.
    @id(HOTAGG_ID_ACTION_SET_DROP_RATE)
    action set_drop_rate(bit<32> rate) {
        drop_rate = rate;
    }

    // Keyless: the controller sets the rate by modifying the default action.
    @id(HOTAGG_ID_TABLE_DROP_SIM)
    table drop_sim {
        actions = {
            set_drop_rate;
        }
        default_action = set_drop_rate(0);
        size = 1;
    }

// Ingress step 3, after drop_sim.apply(): r uniform in [0, DROP_SCALE - 1]; drop if r < rate.
#define HOTAGG_DROP_SIM_DECIDE()                                                       \
    {                                                                                  \
        random(drop_draw, (bit<32>)0, DROP_SCALE - 1);                                 \
        if (drop_draw < drop_rate) {                                                   \
            HOTAGG_DROP(STAT_SIM_DROP);                                                \
        }                                                                              \
    }

#endif  /* HOTAGG_DROP_SIM_P4 */
