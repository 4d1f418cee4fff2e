/*
 * hotagg: hot-key lookup of one entry position.
 *
 * p4c applies a table at most once per pass, so HotaggIngress instantiates this control
 * once per entry position (lookup0..lookup7); each instance owns its own table, actions and
 * direct counter, named HotaggIngress.lookupN.<name> in P4Info. The controller writes every
 * hot key into all 8 tables with the same slot offset.
 *
 * No id annotations in this file: p4c rejects one id that lands on 8 declarations, so these
 * objects get p4c's hashed ids (reproduced by scripts/gen_p4info.py).
 */
#ifndef HOTAGG_HOT_KEY_LOOKUP_P4
#define HOTAGG_HOT_KEY_LOOKUP_P4

control HotKeyLookup(in job_id_t job_id,
                     in hot_key_t entry_key,
                     out bool hit,
                     out slot_t slot_offset) {

    // Packets and bytes of every hit, per entry. v1model counts a direct counter on each
    // hit of its table by itself; the actions need not call count().
    direct_counter(CounterType.packets_and_bytes) hits;

    // offset is relative to the job's slot_base; HotaggIngress checks it against the job's
    // slot_count and NUM_SLOTS before using it (BAD_SLOT otherwise).
    action set_slot(slot_t offset) {
        hit = true;
        slot_offset = offset;
    }

    action miss() {
        hit = false;
        slot_offset = 0;
    }

    table hot_keys {
        key = {
            job_id    : exact @name("job_id");
            entry_key : exact @name("key");
        }
        actions = {
            set_slot;
            @defaultonly miss;
        }
        default_action = miss();
        size = HOT_KEYS_SIZE;
        counters = hits;
    }

    apply {
        hot_keys.apply();
    }
}

#endif  /* HOTAGG_HOT_KEY_LOOKUP_P4 */
