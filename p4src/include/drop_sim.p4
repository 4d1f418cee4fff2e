/*
 * hotagg: data-plane loss simulator, as SwitchML's: loss for tests and experiments where
 * tc netem is unavailable (ingress step 3, every hotagg packet).
 */
#ifndef HOTAGG_DROP_SIM_P4
#define HOTAGG_DROP_SIM_P4

control DropSim(out bool lost) {
    // Drop probability * DROP_SCALE, from the drop_sim default action.
    bit<32> drop_rate = 0;

    // rate = drop probability * 65536; 0 never drops, 65536 drops every hotagg packet.
    @name(".HotaggIngress.set_drop_rate") @id(HOTAGG_ID_ACTION_SET_DROP_RATE)
    action set_drop_rate(bit<32> rate) {
        drop_rate = rate;
    }

    // Keyless: the controller sets the rate by modifying the default action.
    @name(".HotaggIngress.drop_sim") @id(HOTAGG_ID_TABLE_DROP_SIM)
    table drop_sim {
        actions = {
            set_drop_rate;
        }
        default_action = set_drop_rate(0);
        size = 1;
    }

    apply {
        lost = false;
        drop_sim.apply();
        // r uniform in [0, DROP_SCALE - 1]; lost if r < rate. Rate 0 never drops, so it
        // draws nothing (as softswitch/pipeline/drop_sim.py).
        if (drop_rate != 0) {
            bit<32> r;
            random(r, (bit<32>)0, DROP_SCALE - 1);
            lost = r < drop_rate;
        }
    }
}

#endif  /* HOTAGG_DROP_SIM_P4 */
