/*
 * hotagg: in-switch measurement of cold keys (docs/design.md, "Measuring cold keys in the
 * switch"): a count-min sketch over (job_id, key) of the entries of fresh PUSHes that miss
 * the hot-key tables, and a digest when an entry's estimate reaches the threshold, once per
 * key and epoch.
 *
 * SKETCH_ROWS = 2 rows of SKETCH_WIDTH cells. One crc32 over {job_id, key} (10 bytes, the
 * embedded target reproduces it with zlib.crc32) taken modulo SKETCH_HASH_MAX gives 24
 * bits: bits 11..0 index row 0, bits 23..12 row 1. Each row exists twice:
 *   - sketch_cells<r>, a register the data plane reads: cell = epoch (63..32) | reported
 *     (31) | count (30..0). A cell of another epoch reads as count 0, not reported (a lazy
 *     reset: the controller starts an epoch by writing it into sketch_config, nothing is
 *     cleared). The reported bits of the two rows are a partitioned Bloom filter of the keys
 *     already reported in this epoch.
 *   - sketch_row<r>, an indirect counter the controller reads over P4Runtime on both targets
 *     (BMv2 serves no register reads): cumulative, never reset by the data plane; the
 *     controller takes differences between two reads.
 * At most one digest per packet (BMv2 learns one field list per packet, at the end of
 * ingress): an entry that crosses the threshold after another entry of the same packet was
 * reported sets no reported bit, and is reported at its next occurrence.
 *
 * The config table's default action carries epoch and threshold; threshold 0 (the initial
 * default) turns the sketch off: nothing is counted and the per-entry work is one condition.
 */
#ifndef HOTAGG_SKETCH_P4
#define HOTAGG_SKETCH_P4

// Applied once per fresh PUSH of a known job: loads epoch and threshold into meta.sketch.
control SketchConfig(inout local_metadata_t meta) {

    // threshold 0: the sketch is off. A threshold above 2^31 - 1 counts without reporting.
    @name(".HotaggIngress.set_sketch") @id(HOTAGG_ID_ACTION_SET_SKETCH)
    action set_sketch(bit<32> epoch, bit<32> threshold) {
        meta.sketch.on = threshold != 0;
        meta.sketch.epoch = epoch;
        meta.sketch.threshold = threshold;
    }

    // Keyless: the controller sets epoch and threshold by modifying the default action.
    @name(".HotaggIngress.sketch_config") @id(HOTAGG_ID_TABLE_SKETCH_CONFIG)
    table sketch_config {
        actions = {
            set_sketch;
        }
        default_action = set_sketch(0, 0);
        size = 1;
    }

    apply {
        sketch_config.apply();
    }
}

// Per entry (HOTAGG_SKETCH_ENTRY): counts meta.entry.key of job hdr.hotagg.job_id. Takes
// hdr and meta whole, as SlotStore does (p4c copies narrower arguments at every call).
control Sketch(inout headers_t hdr, inout local_metadata_t meta) {

    @name(".HotaggIngress.sketch_row0") @id(HOTAGG_ID_COUNTER_SKETCH_ROW0)
    counter(SKETCH_WIDTH, CounterType.packets_and_bytes) sketch_row0;
    @name(".HotaggIngress.sketch_row1") @id(HOTAGG_ID_COUNTER_SKETCH_ROW1)
    counter(SKETCH_WIDTH, CounterType.packets_and_bytes) sketch_row1;

    @name(".HotaggIngress.sketch_cells0") @id(HOTAGG_ID_REGISTER_SKETCH_CELLS0)
    register<sketch_cell_t>(SKETCH_WIDTH) sketch_cells0;
    @name(".HotaggIngress.sketch_cells1") @id(HOTAGG_ID_REGISTER_SKETCH_CELLS1)
    register<sketch_cell_t>(SKETCH_WIDTH) sketch_cells1;

    reg_index_t index0;
    reg_index_t index1;
    sketch_cell_t cell0;
    sketch_cell_t cell1;

    // Hash, count in both counters, read both cells: one BMv2 action per entry.
    @hidden
    action locate_and_read() {
        bit<32> h;
        hash(h, HashAlgorithm.crc32, 32w0, {hdr.hotagg.job_id, meta.entry.key},
             SKETCH_HASH_MAX);
        index0 = h & SKETCH_INDEX_MASK;
        index1 = (h >> SKETCH_INDEX_BITS) & SKETCH_INDEX_MASK;
        sketch_row0.count(index0);
        sketch_row1.count(index1);
        sketch_cells0.read(cell0, index0);
        sketch_cells1.read(cell1, index1);
    }

    @hidden
    action write_cells() {
        sketch_cells0.write(index0, cell0);
        sketch_cells1.write(index1, cell1);
    }

    apply {
        locate_and_read();
        bit<32> epoch = meta.sketch.epoch;
        // Another epoch's cell counts 0 and is not reported (lazy reset).
        if (cell0[63:32] != epoch) {
            cell0 = epoch ++ 32w0;
        }
        if (cell1[63:32] != epoch) {
            cell1 = epoch ++ 32w0;
        }
        // count + 1 in 31 bits (wraps), the reported bit kept.
        cell0[30:0] = cell0[30:0] + 1;
        cell1[30:0] = cell1[30:0] + 1;
        bit<31> estimate = cell0[30:0];
        if (cell1[30:0] < estimate) {
            estimate = cell1[30:0];
        }
        if (!meta.sketch.report && ((bit<32>)estimate) >= meta.sketch.threshold &&
            (cell0[31:31] == 0 || cell1[31:31] == 0)) {
            meta.sketch.report = true;
            meta.sketch.digest.job_id = hdr.hotagg.job_id;
            meta.sketch.digest.key = meta.entry.key;
            meta.sketch.digest.epoch = epoch;
            meta.sketch.digest.estimate = (bit<32>)estimate;
            cell0[31:31] = 1;
            cell1[31:31] = 1;
        }
        write_cells();
    }
}

// Entry position I of a fresh PUSH with the sketch on: counted if it missed the hot keys.
#define HOTAGG_SKETCH_ENTRY                                                           \
    if (meta.sketch.on && !meta.entry.hit) {                                          \
        sketch.apply(hdr, meta);                                                      \
    }

#endif  /* HOTAGG_SKETCH_P4 */
