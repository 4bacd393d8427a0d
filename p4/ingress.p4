/* Ingress: consume MAC control, classify, route with ECMP, run the lossless logic, count. */
#ifndef _ROCE_INGRESS_P4_
#define _ROCE_INGRESS_P4_

control RoceIngress(inout headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t std_meta) {

    /* Per (ingress port, class): packets and bytes received. */
    counter(PORT_TC_CELLS, CounterType.packets_and_bytes) rx_port_tc;
    /* Per ingress port: every frame the P4 program saw, before any decision. The hidden loss
     * in front of BMv2 is (switch-side veth RX packets) - (this counter). */
    counter(NUM_PORTS, CounterType.packets_and_bytes) rx_port;
    /* Per (ingress port, reason): frames the switch did not forward. */
    counter(DROP_CELLS, CounterType.packets) drops;
    /* Per (ingress port, class): PFC frames received, counted per class enabled in the vector. */
    counter(PORT_TC_CELLS, CounterType.packets) pfc_rx;

    action_selector(HashAlgorithm.crc16, 32w1024, 32w14) ecmp_selector;

    /* Per port, its own MAC. A frame of the agents' EtherType from it is the switch's own
     * plug (testbed.machine.ports.plug_sizes), and a frame of credits from it is the switch's
     * own (mode ib-credit, testbed.agent.credit): BMv2 reads a port's veth with a packet
     * socket, which also sees what other sockets send out of it, so every plug and credit
     * frame the agent sends out of a port comes back here as if received. It never crossed
     * the link: not counted. */
    table own_plug {
        key = { std_meta.ingress_port: exact; hdr.ethernet.src_addr: exact; }
        actions = { NoAction; }
        default_action = NoAction();
        size = 512;
    }

#ifndef PLAIN_FORWARDING
    RoceLossless() lossless;
#endif

    action drop_with(bit<32> reason) {
        meta.drop = 1;
        meta.drop_reason = reason;
        mark_to_drop(std_meta);
    }

    action set_tc(tc_t tc) {
        meta.tc = tc;
    }

    /* DSCP_TO_TC_MAP */
    table dscp_to_tc {
        key = { hdr.ipv4.dscp: exact; }
        actions = { set_tc; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    /* Which fields feed the ECMP hash: each mask is all ones (field in) or zero (field out). */
    action set_hash_config(bit<16> seed, bit<32> src_addr_mask, bit<32> dst_addr_mask,
                           bit<8> protocol_mask, bit<16> src_port_mask,
                           bit<16> dst_port_mask) {
        meta.hash_seed = seed;
        meta.hash_src_addr = hdr.ipv4.src_addr & src_addr_mask;
        meta.hash_dst_addr = hdr.ipv4.dst_addr & dst_addr_mask;
        meta.hash_protocol = hdr.ipv4.protocol & protocol_mask;
        meta.hash_src_port = meta.l4_src_port & src_port_mask;
        meta.hash_dst_port = meta.l4_dst_port & dst_port_mask;
    }

    table hash_config {
        key = { }
        actions = { set_hash_config; }
        default_action = set_hash_config(0, 0xffffffff, 0xffffffff, 0xff, 0xffff, 0xffff);
        size = 1;
    }

    /* The source MAC carries the frame's ingress port (INPUT_MAC_SHIFT): in mode ib-credit
     * the egress port's kernel queue keeps one FIFO per input by it (testbed.machine.inputs),
     * to count what each input holds in the switch, as InfiniBand's credits count it. */
    action set_nexthop(port_t port, mac_addr_t smac, mac_addr_t dmac) {
        std_meta.egress_spec = port;
        hdr.ethernet.src_addr = smac | (((mac_addr_t) std_meta.ingress_port) << INPUT_MAC_SHIFT);
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_route {
        key = {
            hdr.ipv4.dst_addr:  lpm;
            meta.hash_seed:     selector;
            meta.hash_src_addr: selector;
            meta.hash_dst_addr: selector;
            meta.hash_protocol: selector;
            meta.hash_src_port: selector;
            meta.hash_dst_port: selector;
        }
        actions = { set_nexthop; }
        implementation = ecmp_selector;
        size = 4096;
    }

    apply {
        bit<32> in_port = (bit<32>) std_meta.ingress_port;
        if (hdr.ethernet.ether_type == ETHERTYPE_KICK || hdr.ethernet.ether_type == ETHERTYPE_CREDIT) {
            if (own_plug.apply().hit) {
                mark_to_drop(std_meta);
                exit;
            }
        }
        rx_port.count(in_port);
        meta.tc = 0;
        meta.drop = 0;
        meta.lossless_kind = LOSSLESS_NONE;

        if (std_meta.parser_error != error.NoError) {
            drop_with(DROP_PARSE_ERROR);
        } else if (hdr.pfc.isValid()) {
            /* PFC is link-local: consume it, never forward it. */
            if (hdr.pfc.opcode == MAC_CONTROL_PFC) {
                bit<32> base = in_port * NUM_TCS;
                if (hdr.pfc.class_enable[0:0] == 1) { pfc_rx.count(base + 0); }
                if (hdr.pfc.class_enable[1:1] == 1) { pfc_rx.count(base + 1); }
                if (hdr.pfc.class_enable[2:2] == 1) { pfc_rx.count(base + 2); }
                if (hdr.pfc.class_enable[3:3] == 1) { pfc_rx.count(base + 3); }
                if (hdr.pfc.class_enable[4:4] == 1) { pfc_rx.count(base + 4); }
                if (hdr.pfc.class_enable[5:5] == 1) { pfc_rx.count(base + 5); }
                if (hdr.pfc.class_enable[6:6] == 1) { pfc_rx.count(base + 6); }
                if (hdr.pfc.class_enable[7:7] == 1) { pfc_rx.count(base + 7); }
            }
            meta.lossless_kind = LOSSLESS_PFC;
            drop_with(DROP_PFC_CONSUMED);
        } else if (hdr.tick.isValid()) {
            /* Only the switch's own agent may tick; from anywhere else it is dropped. */
            if (std_meta.ingress_port == AGENT_PORT) {
                meta.lossless_kind = LOSSLESS_TICK;
            } else {
                drop_with(DROP_NOT_IPV4);
            }
        } else if (!hdr.ipv4.isValid()) {
            /* A neighbour's plug (testbed.machine.ports: what its closing gate sent to use
             * up its burst) or credits (its agent reads them off the link) crossed the link,
             * so rx_port counts it as the veth does; it is no fault of anyone's: dropped, and
             * not counted as a drop. */
            if (hdr.ethernet.ether_type == ETHERTYPE_KICK || hdr.ethernet.ether_type == ETHERTYPE_CREDIT) {
                mark_to_drop(std_meta);
            } else {
                drop_with(DROP_NOT_IPV4);
            }
        } else if (std_meta.checksum_error == 1) {
            drop_with(DROP_BAD_CHECKSUM);
        } else {
            dscp_to_tc.apply();
            if (hdr.udp.isValid()) {
                meta.l4_src_port = hdr.udp.src_port;
                meta.l4_dst_port = hdr.udp.dst_port;
            } else if (hdr.tcp.isValid()) {
                meta.l4_src_port = hdr.tcp.src_port;
                meta.l4_dst_port = hdr.tcp.dst_port;
            } else {
                meta.l4_src_port = 0;
                meta.l4_dst_port = 0;
            }
            if (hdr.ipv4.ttl <= 1) {
                drop_with(DROP_TTL_EXPIRED);
            } else {
                hash_config.apply();
                if (!ipv4_route.apply().hit) {
                    drop_with(DROP_NO_ROUTE);
                } else {
                    meta.lossless_kind = LOSSLESS_DATA;
                }
            }
        }

#ifndef PLAIN_FORWARDING
        lossless.apply(hdr, meta, std_meta);  /* it looks at lossless_kind first */
#endif
        std_meta.priority = meta.tc;
        rx_port_tc.count(in_port * NUM_TCS + (bit<32>) meta.tc);
        if (meta.drop == 1) {
            drops.count(in_port * NUM_DROP_REASONS + meta.drop_reason);
        }
    }
}

#endif
