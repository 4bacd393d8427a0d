/* Egress: count what leaves, per port and class; build the PFC frames ingress asked for. */
#ifndef _ROCE_EGRESS_P4_
#define _ROCE_EGRESS_P4_

control RoceEgress(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t std_meta) {

    /* Per (egress port, class): packets and bytes sent. */
    counter(PORT_TC_CELLS, CounterType.packets_and_bytes) tx_port_tc;
    /* Per egress port. */
    counter(NUM_PORTS, CounterType.packets_and_bytes) tx_port;

    RocePfcEgress() pfc_egress;

    /* What leaves, and how long BMv2 held a lossless data packet (from its arrival to this
     * egress pass): one action, so that the common path pays for one table, not a condition
     * and a table for each step (see what BMv2 costs per packet, in RoceLossless). */
    action count_tx() {
        bit<32> out_port = (bit<32>) std_meta.egress_port;
#ifndef PLAIN_FORWARDING
        bit<32> lag = (meta.lossless_data == 1)
                      ? (bit<32>) (std_meta.egress_global_timestamp
                                   - std_meta.ingress_global_timestamp)
                      : 32w0;
        bit<32> worst;
        bmv2_lag_max.read(worst, 0);
        bmv2_lag_max.write(0, (lag > worst) ? lag : worst);
#endif
        tx_port.count(out_port);
        tx_port_tc.count(out_port * NUM_TCS + (bit<32>) std_meta.priority);
    }

    apply {
        if (std_meta.instance_type != 0) {
            pfc_egress.apply(hdr, meta, std_meta);  /* a PFC frame in the making */
        } else {
            count_tx();
        }
    }
}

#endif
