/* Lossless Ethernet in the data plane: a phantom of each kernel egress queue, RED/ECN marking
 * on it, and PFC frames generated toward the ingress port that feeds a congested lossless queue.
 *
 * Why a phantom: the real queue of a port is in the kernel (htb/tbf on the switch's veth), where
 * the program cannot see it. The phantom adds each packet's bytes when the packet is sent to the
 * queue and drains at the port's rate over the time the class was not paused, as the kernel
 * queue does; the switch agent resyncs it from the kernel's backlog with every tick it sends.
 *
 * What the phantom counts: every byte the program has admitted into the queue and not yet seen
 * leave the kernel, so the bytes BMv2 itself still holds (its input and egress queues, between
 * this program and the kernel) count too, as they would in a real switch's buffer. A resync
 * therefore sets the phantom to (bytes admitted) - (bytes the kernel let go of, as the agent read
 * them), never to the kernel's backlog alone: that erased what BMv2 held at the resync, and the
 * phantom then stood below the real occupancy by as much (the drift that cost lossless drops).
 * The agent's reading is older than this tick, so the kernel has let go of at least as much
 * since: the resynced phantom can only overstate the occupancy, which is the safe side for PFC.
 *
 * Why ticks: the program only runs when a packet arrives, and a paused upstream sends none, so
 * something else must notice that a queue drained (to send XON) or is still full (to refresh
 * XOFF before it expires). The agent sends a tick frame per (port, lossless class) through its
 * own port; the program resyncs the phantom, records the drift, and answers with PFC frames,
 * multicast to every port and kept only on the ports it paused.
 */
#ifndef _ROCE_LOSSLESS_P4_
#define _ROCE_LOSSLESS_P4_

/* Phantom queue per (egress port, class), in bytes, and when it was last brought up to date. */
register<bit<32>>(PORT_TC_CELLS) q_bytes;
register<bit<48>>(PORT_TC_CELLS) q_time;
/* Until when (us) a PFC frame received on the port pauses the class: the phantom does not drain. */
register<bit<48>>(PORT_TC_CELLS) paused_until;
/* Per (ingress port, class): when we last sent XOFF there (us); 0 = never. */
register<bit<48>>(PORT_TC_CELLS) xoff_sent_at;
/* Per (egress port, class): when a tick last refreshed the pauses on its account (us). */
register<bit<48>>(PORT_TC_CELLS) refreshed_at;
/* Per (egress port, class): the ingress ports we paused on its account (bit i = port i). */
register<bit<64>>(PORT_TC_CELLS) paused_by;
/* Per (egress port, class): bytes admitted into the queue so far, modulo 2^32. */
register<bit<32>>(PORT_TC_CELLS) admitted;
/* Per (egress port, class), at the last resync: the drained phantom minus the occupancy the
 * resync found (two's complement; negative = the phantom had fallen below it), and the bytes of
 * that occupancy not yet in the kernel (what BMv2 held). Telemetry: the agent reads both. */
register<bit<32>>(PORT_TC_CELLS) drift;
register<bit<32>>(PORT_TC_CELLS) held;
/* Per (egress port, class): the most the phantom stood below the occupancy a resync found,
 * since the agent last read and cleared it (bytes): the fidelity guard's figure. */
register<bit<32>>(PORT_TC_CELLS) below_max;
/* Per (egress port, class): the largest occupancy a resync found since the agent last read and
 * cleared it (bytes): compared with the configured buffer, whether the queue went past it. */
register<bit<32>>(PORT_TC_CELLS) occupancy_max;
/* The longest a data packet spent inside BMv2 (input buffer, ingress, egress queue) since the
 * agent last read and cleared it, in us: the switch's own part of the PFC reaction time. */
register<bit<32>>(1) bmv2_lag_max;
/* Per (egress port, class): 1 while the PFC watchdog has the queue stop honouring PFC (its
 * drop and forward actions). Written by the switch agent; received pauses are then ignored, so
 * the phantom keeps draining and no XOFF spreads the storm upstream. */
register<bit<1>>(PORT_TC_CELLS) pfc_ignored;

/* A received PFC frame pauses class i for t quanta, unless the watchdog ignores it there. */
#define PFC_PAUSE_CLASS(i, t) \
    if (hdr.pfc.class_enable[i:i] == 1) { \
        pfc_ignored.read(ignored, base + i); \
        if (ignored == 0) { \
            pause_queue(base + i, hdr.pfc.t); \
        } \
    }

control RoceLossless(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t std_meta) {

    counter(PORT_TC_CELLS, CounterType.packets) ecn_marked;
    counter(PORT_TC_CELLS, CounterType.packets) pfc_xoff_triggered;
    counter(PORT_TC_CELLS, CounterType.packets) ticks;

    /* A port's PFC quantum (us, times 2^10), for the pauses it receives; its drain rate
     * (bytes per 2^20 us), to bring its phantoms up to date as a pause begins; and what its
     * kernel gate lets through as it closes (bytes), which the phantom drains then. */
    action set_quantum(bit<32> quantum_us_q10, bit<32> rate_q20, bit<32> gate_leak) {
        meta.quantum_us_q10 = quantum_us_q10;
        meta.port_rate_q20 = rate_q20;
        meta.gate_leak = gate_leak;
    }
    table ingress_port_quantum {
        key = { std_meta.ingress_port: exact; }
        actions = { set_quantum; NoAction; }
        default_action = NoAction();
        size = NUM_PORTS;
    }

    /* Bring the phantom up to date at `now`: drain it over the unpaused time since last. */
    action drain(bit<32> idx) {
        bit<32> q;
        bit<48> last;
        bit<48> pu;
        q_bytes.read(q, idx);
        q_time.read(last, idx);
        paused_until.read(pu, idx);
        bit<48> start = (pu > last) ? pu : last;
        bit<64> elapsed = (meta.now > start) ? (bit<64>) (meta.now - start) : 64w0;
        bit<64> drained = (elapsed * (bit<64>) meta.port_rate_q20) >> 20;
        meta.q = ((bit<64>) q > drained) ? q - (bit<32>) drained : 32w0;
    }

    /* Which queue a data packet joins (its egress port and class) or a tick names, and when.
     *
     * Why so much is folded into single actions here: BMv2 interprets the program table by
     * table, and p4c makes a hidden table of every straight run of statements between two
     * conditions, so each `if` on the per-packet path costs a condition and a table. The
     * common path (a data packet into a lossless queue) goes through locate, queue_profile
     * (which also drains the phantom) and admit (which also runs RED). */
    action locate() {
        meta.now = std_meta.ingress_global_timestamp;
        bool is_tick = meta.lossless_kind == LOSSLESS_TICK;
        meta.q_port = is_tick ? (bit<32>) hdr.tick.port : (bit<32>) std_meta.egress_spec;
        meta.q_tc = is_tick ? (tc_t) hdr.tick.tc : meta.tc;
        meta.q_idx = meta.q_port * NUM_TCS + (bit<32>) meta.q_tc;
    }

    /* Per (egress port, class): the port's drain rate (bytes per 2^20 us), the ECN profile and
     * the PFC thresholds, in bytes; and the queue's phantom, drained until now (meta.q). One
     * lookup per packet: BMv2 pays for every table. */
    action set_queue_profile(bit<32> rate_q20, bit<1> ecn_enable, bit<32> kmin, bit<32> kmax,
                             bit<32> pmax_slope, bit<1> pfc_enable, bit<32> xoff, bit<32> xon,
                             bit<16> pause_quanta, bit<48> refresh_us) {
        meta.qp_valid = 1;
        meta.port_rate_q20 = rate_q20;
        meta.ecn_enable = ecn_enable;
        meta.kmin = kmin;
        meta.kmax = kmax;
        meta.pmax_slope = pmax_slope;
        meta.pfc_enable = pfc_enable;
        meta.xoff = xoff;
        meta.xon = xon;
        meta.pause_quanta = pause_quanta;
        meta.refresh_us = refresh_us;
        drain(meta.q_idx);
    }
    table queue_profile {
        key = { meta.q_port: exact; meta.q_tc: exact; }
        actions = { set_queue_profile; NoAction; }
        default_action = NoAction();
        size = PORT_TC_CELLS;
    }

    /* A data packet joins its queue: the phantom grows by its bytes, and so does the count of
     * bytes admitted (what a resync subtracts the kernel's released bytes from). And RED on
     * the phantom, for ECN-capable packets where the queue marks (Floyd and Jacobson 1993,
     * without the averaging, as switch ASICs do it on the instantaneous queue): above Kmax
     * always, between Kmin and Kmax with a probability rising linearly to Pmax. Both in one
     * action, and the CE mark written through a ternary: one table on the common path. */
    action admit() {
        meta.q = meta.q + std_meta.packet_length;
        q_bytes.write(meta.q_idx, meta.q);
        q_time.write(meta.q_idx, meta.now);
        bit<32> adm;
        admitted.read(adm, meta.q_idx);
        admitted.write(meta.q_idx, adm + std_meta.packet_length);
        meta.lossless_data = 1;
        bit<16> r;
        random(r, 16w0, 16w0xffff);
        bit<64> p16 = ((bit<64>) (meta.q - meta.kmin) * (bit<64>) meta.pmax_slope) >> 16;
        meta.ce_mark = (meta.ecn_enable == 1 && hdr.ipv4.ecn != 0 &&
                        (meta.q > meta.kmax || (meta.q > meta.kmin && (bit<64>) r < p16)))
                       ? 1w1 : 1w0;
        hdr.ipv4.ecn = (meta.ce_mark == 1) ? 2w3 : hdr.ipv4.ecn;
    }

    /* A pause (quanta > 0) or its end (quanta 0) for queue idx, at `now`. The phantom is first
     * brought up to date: it drained until this instant, and a pause that froze it as it stood
     * at its last packet or tick would lose that drain, so that the phantom stood above the
     * real queue by the port's rate times that gap, at every pause (measured before this: up
     * to 50 KB at 10 Mbit/s, about 25 ms of the link, between two resyncs).
     * A pause that begins (the class was not paused) also drains what the kernel gate lets
     * through as it closes (testbed.ports: a closed tbf still holds a burst of the largest
     * frame, two 4 KB RoCE frames with a 9000-byte MTU). Without it the phantom stood that
     * much above the kernel queue after every pause: measured 2 frames a pause, 30 KB between
     * two resyncs at 20 Mbit/s. */
    action pause_queue(bit<32> idx, bit<16> quanta) {
        drain(idx);
        bit<32> q = meta.q;
        bit<48> pu;
        paused_until.read(pu, idx);
        if (quanta != 0 && pu <= meta.now) {
            q = (q > meta.gate_leak) ? q - meta.gate_leak : 32w0;
        }
        q_bytes.write(idx, q);
        q_time.write(idx, meta.now);
        paused_until.write(idx, meta.now +
            (bit<48>) (((bit<64>) quanta * (bit<64>) meta.quantum_us_q10) >> 10));
    }

    apply {
        if (meta.lossless_kind == LOSSLESS_DATA || meta.lossless_kind == LOSSLESS_TICK) {
            locate();
            bit<32> idx = meta.q_idx;
            queue_profile.apply();  /* and the phantom drained until now, when it has one */

            if (meta.lossless_kind == LOSSLESS_DATA && meta.qp_valid == 1) {
                /* A data packet on its way to (egress_spec, tc): it joins the queue. */
                admit();  /* and ECN: RED on the phantom */
                if (meta.ce_mark == 1) {
                    ecn_marked.count(idx);
                }

                /* PFC: over XOFF, pause the port the packet came from (refreshed before the
                 * pause expires). */
                bit<32> q = meta.q;
                if (meta.pfc_enable == 1 && q > meta.xoff) {
                    bit<32> pidx = (bit<32>) std_meta.ingress_port * NUM_TCS
                                   + (bit<32>) meta.tc;
                    bit<48> last;
                    xoff_sent_at.read(last, pidx);
                    bit<64> ports;
                    paused_by.read(ports, idx);
                    bit<64> me = (bit<64>) 1 << (bit<8>) std_meta.ingress_port;
                    paused_by.write(idx, ports | me);
                    /* XOFF if this port is not paused on this queue's account (never, or an
                     * XON resumed it), or to refresh a pause that is about to expire. */
                    if ((ports & me) == 0 || meta.now - last > meta.refresh_us) {
                        xoff_sent_at.write(pidx, meta.now);
                        meta.pfc_tc = meta.tc;
                        meta.pfc_quanta = meta.pause_quanta;
                        pfc_xoff_triggered.count(pidx);
                        clone_preserving_field_list(CloneType.I2E,
                                                    (bit<32>) std_meta.ingress_port, FL_PFC);
                    }
                }
            } else if (meta.lossless_kind == LOSSLESS_TICK) {
                /* The agent's tick for (port, class). A resync tick carries the kernel's
                 * backlog: the phantom takes it and the drift is recorded. A timer tick
                 * (backlog all ones) only asks the program to judge its own drained phantom.
                 * Either way: XON if the queue drained, XOFF again if it is still full. */
                ticks.count(idx);
                bit<32> level = meta.q;
                if (hdr.tick.backlog != TICK_TIMER_ONLY) {
                    level = hdr.tick.backlog;
                    if (hdr.tick.sent != TICK_SENT_UNKNOWN) {
                        bit<32> adm;
                        admitted.read(adm, idx);
                        bit<32> occupancy = adm - hdr.tick.sent;
                        /* below the backlog (or "negative"): counters out of step, e.g. a
                         * queue without a profile earlier; the kernel's backlog is a floor */
                        if (occupancy[31:31] == 0 && occupancy > level) {
                            level = occupancy;
                        }
                    }
                    drift.write(idx, meta.q - level);
                    held.write(idx, level - hdr.tick.backlog);
                    bit<32> peak;
                    occupancy_max.read(peak, idx);
                    if (level > peak) {
                        occupancy_max.write(idx, level);
                    }
                    if (level > meta.q) {
                        bit<32> worst;
                        below_max.read(worst, idx);
                        if (level - meta.q > worst) {
                            below_max.write(idx, level - meta.q);
                        }
                    }
                }
                q_bytes.write(idx, level);
                q_time.write(idx, meta.now);
                bit<64> ports;
                paused_by.read(ports, idx);
                meta.pfc_ports = ports;
                meta.pfc_tc = (tc_t) hdr.tick.tc;
                if (ports == 0 || meta.qp_valid == 0) {
                    mark_to_drop(std_meta);
                } else if (level <= meta.xon) {
                    meta.pfc_quanta = 0;                  /* XON: the queue has drained */
                    paused_by.write(idx, 0);
                    std_meta.mcast_grp = PFC_MCAST_GROUP;
                } else {
                    /* Above XON the pause holds (PFC's hysteresis): refresh it before it
                     * expires, however long that takes -- this is what lets a cycle of full
                     * buffers deadlock, as on real switches. */
                    bit<48> last;
                    refreshed_at.read(last, idx);
                    if (meta.now - last > meta.refresh_us) {
                        refreshed_at.write(idx, meta.now);
                        meta.pfc_quanta = meta.pause_quanta;
                        std_meta.mcast_grp = PFC_MCAST_GROUP;
                    } else {
                        mark_to_drop(std_meta);
                    }
                }
            }
        } else if (meta.lossless_kind == LOSSLESS_PFC) {
            /* A PFC frame from the peer of this port: the phantoms of its classes stop draining
             * for the pause time (the agent closes the kernel gates). */
            meta.now = std_meta.ingress_global_timestamp;
            ingress_port_quantum.apply();
            bit<32> base = (bit<32>) std_meta.ingress_port * NUM_TCS;
            bit<1> ignored;
            PFC_PAUSE_CLASS(0, time0)
            PFC_PAUSE_CLASS(1, time1)
            PFC_PAUSE_CLASS(2, time2)
            PFC_PAUSE_CLASS(3, time3)
            PFC_PAUSE_CLASS(4, time4)
            PFC_PAUSE_CLASS(5, time5)
            PFC_PAUSE_CLASS(6, time6)
            PFC_PAUSE_CLASS(7, time7)
        }
    }
}

/* Egress: turn a clone (one port) or a tick's replica (kept where the bitmap says) into an
 * IEEE 802.1Qbb frame for class pfc_tc with pfc_quanta (0 = XON). */
control RocePfcEgress(inout headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t std_meta) {

    counter(PORT_TC_CELLS, CounterType.packets) pfc_tx;

    action set_port_mac(mac_addr_t mac) {
        hdr.ethernet.src_addr = mac;
    }
    table port_mac {
        key = { std_meta.egress_port: exact; }
        actions = { set_port_mac; NoAction; }
        default_action = NoAction();
        size = NUM_PORTS;
    }

    apply {
        bool is_clone = std_meta.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE;
        bool is_replica = std_meta.instance_type == PKT_INSTANCE_TYPE_REPLICATION;
        if (!is_clone && !is_replica) {
            return;
        }
        if (is_replica &&
            ((meta.pfc_ports >> (bit<8>) std_meta.egress_port) & 1) == 0) {
            mark_to_drop(std_meta);
            return;
        }
        hdr.ethernet.dst_addr = PFC_DST_MAC;
        hdr.ethernet.ether_type = ETHERTYPE_MAC_CONTROL;
        port_mac.apply();
        hdr.pfc.setValid();
        hdr.pfc.opcode = MAC_CONTROL_PFC;
        hdr.pfc.class_enable = (bit<16>) 1 << (bit<8>) meta.pfc_tc;
        hdr.pfc.time0 = 0;
        hdr.pfc.time1 = 0;
        hdr.pfc.time2 = 0;
        hdr.pfc.time3 = 0;
        hdr.pfc.time4 = 0;
        hdr.pfc.time5 = 0;
        hdr.pfc.time6 = 0;
        hdr.pfc.time7 = 0;
        if (meta.pfc_tc == 0) { hdr.pfc.time0 = meta.pfc_quanta; }
        if (meta.pfc_tc == 1) { hdr.pfc.time1 = meta.pfc_quanta; }
        if (meta.pfc_tc == 2) { hdr.pfc.time2 = meta.pfc_quanta; }
        if (meta.pfc_tc == 3) { hdr.pfc.time3 = meta.pfc_quanta; }
        if (meta.pfc_tc == 4) { hdr.pfc.time4 = meta.pfc_quanta; }
        if (meta.pfc_tc == 5) { hdr.pfc.time5 = meta.pfc_quanta; }
        if (meta.pfc_tc == 6) { hdr.pfc.time6 = meta.pfc_quanta; }
        if (meta.pfc_tc == 7) { hdr.pfc.time7 = meta.pfc_quanta; }
        hdr.ipv4.setInvalid();
        hdr.udp.setInvalid();
        hdr.bth.setInvalid();
        hdr.tick.setInvalid();
        truncate(60);
        pfc_tx.count((bit<32>) std_meta.egress_port * NUM_TCS + (bit<32>) meta.pfc_tc);
    }
}

#endif
