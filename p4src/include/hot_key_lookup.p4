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

// Looks up meta.entry.key (the entry position being processed, see HOTAGG_PROCESS_ENTRY)
// and sets meta.entry.hit and meta.entry.offset. It takes hdr and meta whole because p4c
// copies narrower arguments in and out at every call (an extra BMv2 table per entry).
control HotKeyLookup(inout headers_t hdr, inout local_metadata_t meta) {

    // Packets and bytes of every hit, per entry. v1model counts a direct counter on each
    // hit of its table by itself; the actions need not call count().
    direct_counter(CounterType.packets_and_bytes) hits;

    // offset is relative to the job's slot_base; SlotStore checks it against the job's
    // slot_count and NUM_SLOTS before using it (BAD_SLOT otherwise). The hit also locates
    // the entry's slot state for SlotStore (see entry_meta_t).
    action set_slot(slot_t offset) {
        meta.entry.hit = true;
        meta.entry.offset = offset;
        meta.entry.copy_index = agg_index(hdr.hotagg.iteration, meta.job.slot_base + offset);
        meta.entry.cell_index = (meta.job.slot_base + offset) & SLOT_MASK;
    }

    action miss() {
        meta.entry.hit = false;
        meta.entry.offset = 0;
    }

    table hot_keys {
        key = {
            hdr.hotagg.job_id : exact @name("job_id");
            meta.entry.key    : exact @name("key");
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
