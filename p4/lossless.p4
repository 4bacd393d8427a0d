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
/* Where a port has phantoms of more than one class (two lossless classes, as SONiC's layout
 * has them): the port serves a higher class first (strict priority, testbed.machine.ports), so
 * a class drains only with what the port's rate leaves after the classes above it. Per (egress
 * port, class): the bytes this class and the profiled classes above it were served, as far as
 * this cell has seen, modulo 2^32 (what the class below subtracts from its own drain); the
 * `served` of the nearest profiled class above at this cell's last update; and that class's
 * cell (EMPTY_CELL where none is above), learned from the queue's own ticks and packets. */
register<bit<32>>(PORT_TC_CELLS) served;
register<bit<32>>(PORT_TC_CELLS) above_seen;
register<bit<32>>(PORT_TC_CELLS) above_of;
/* Per (egress port, class): 1 while the PFC watchdog has the queue stop honouring PFC (its
 * drop and forward actions). Written by the switch agent; received pauses are then ignored, so
 * the phantom keeps draining and no XOFF spreads the storm upstream. */
register<bit<1>>(PORT_TC_CELLS) pfc_ignored;

/* A received PFC frame pauses class i for t quanta (pause_queue looks at the watchdog's flag). */
#define PFC_PAUSE_CLASS(i, t) \
    if (hdr.pfc.class_enable[i:i] == 1) { \
        p_idx = base + i; \
        p_quanta = hdr.pfc.t; \
        pause_queue(); \
    }

/* The packet's arrival: every step of the lossless control happens at this instant. */
#define NOW std_meta.ingress_global_timestamp

control RoceLossless(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t std_meta) {

    counter(PORT_TC_CELLS, CounterType.packets) ecn_marked;
    counter(PORT_TC_CELLS, CounterType.packets) pfc_xoff_triggered;
    counter(PORT_TC_CELLS, CounterType.packets) ticks;

    /* What BMv2 costs per packet, and why this control is written as it is.
     *
     * BMv2 interprets the program table by table, and p4c makes a hidden table of every
     * straight run of statements between two conditions: each `if` on the per-packet path
     * costs a condition and a table. BMv2 also resets every metadata field before each packet,
     * about 650 instructions a field (callgrind, either build): the variables below, the
     * locals of actions and every temporary p4c makes are such fields. So:
     * - the variables live here, not in metadata_t, where the program built without this
     *   control (-DPLAIN_FORWARDING) would reset them too;
     * - p4c makes a temporary field for each extern argument (a register index, a value
     *   written) that is an expression, at each place an action is inlined; and it copies
     *   an assignment into each later use of the variable in the same run of statements,
     *   which makes such expressions of plain variables. So indices and written values are
     *   variables set in another action (a table's, or one of their own), or assigned only
     *   from themselves (q = q + ...), which p4c cannot copy forward;
     * - the eight classes of a received PFC frame share one set of variables: each class
     *   of the frame had its own copy of pause_queue's temporaries, 64 fields in all;
     * - a data packet goes through one table (queue_profile) and two conditions.
     * benchmarks/bmv2_instructions.py counts the instructions a packet costs.
     */
    bit<32> q;            /* the queue's phantom, drained until now (bytes) */
    bit<32> q_idx;        /* the queue's cell in each register: port * NUM_TCS + class */
    bit<1>  ce_mark;      /* RED's verdict for this packet */
    bit<1>  xoff_due;     /* the packet took its queue past XOFF */
    bit<16> q_pause_quanta;  /* the quanta an XOFF asks for */
    bit<48> q_refresh_us;    /* how often that XOFF is renewed while the queue stays full */
    bit<32> q_xon;
    bit<1>  tick_valid;   /* the tick names a queue that has a profile */
    bit<32> port_rate;       /* a PFC frame's port: see set_quantum */
    bit<32> port_quantum;
    bit<32> port_gate_leak;
    bit<32> p_idx;        /* a cell of the packet's ingress port: the queue a received PFC
                           * class pauses, or the port and class an XOFF goes to */
    bit<16> p_quanta;     /* what the received PFC frame asks of that class */
    bit<48> pu;           /* until when the queue drain() brought up to date is paused */
    /* What the steps read from registers. One variable for each kind, shared by the steps:
     * each would be a field of its own. */
    bit<48> last;         /* a queue's last update, or when an XOFF was last sent or renewed */
    bit<64> ports;        /* the ports paused on a queue's account */
    bit<32> adm;          /* bytes admitted into a queue */
    bit<32> seen_max;     /* a maximum the agent reads and clears */
    bit<32> sv;           /* a queue's served, and that of the class above it */
    bit<32> sv_above;
    bit<32> seen;         /* the class above's served at the queue's last update */
    bit<32> p_above;      /* the profiled classes above the queue a PFC frame pauses */
    bit<32> p_above2;
    bit<32> p_above3;

    /* A port's PFC quantum (us, times 2^10), for the pauses it receives; its drain rate
     * (bytes per 2^20 us), to bring its phantoms up to date as a pause begins; and what its
     * kernel gate lets through as it closes (bytes), which the phantom drains then. */
    action set_quantum(bit<32> quantum_us_q10, bit<32> rate_q20, bit<32> gate_leak) {
        port_quantum = quantum_us_q10;
        port_rate = rate_q20;
        port_gate_leak = gate_leak;
    }
    table ingress_port_quantum {
        key = { std_meta.ingress_port: exact; }
        actions = { set_quantum; }
        default_action = set_quantum(0, 0, 0);  /* a port without one: no pause, no drain */
        size = NUM_PORTS;
    }

    /* Bring the phantom of cell idx up to date at `now` (into q): drain it at the port's rate
     * over the time since its last update that the class was not paused (until pu). q is
     * read from the register and then only ever assigned from itself: p4c would otherwise copy
     * this whole expression into each later use of q in the action, and BMv2 evaluate it
     * there again. */
    action drain(bit<32> idx, bit<32> rate_q20) {
        q_bytes.read(q, idx);
        q_time.read(last, idx);
        paused_until.read(pu, idx);
        bit<48> start = (pu > last) ? pu : last;
        bit<64> drained = ((bit<64>) (NOW |-| start) * (bit<64>) rate_q20) >> 20;
        q = (bit<32>) ((bit<64>) q |-| drained);  /* |-|: saturating, one operation in BMv2 */
    }

    /* drain() for a queue that shares its port with profiled classes above it, the nearest in
     * cell `above`: over the time since this cell's last update the port served those classes
     * first, served[above] - above_seen[idx] bytes, and this class drains only what the port's
     * rate left. Exact for a strict-priority port when every class above was brought up to
     * date at this instant first, top down (refresh_above): then what they took fits in this
     * interval's budget. A class above left lagging would hand its service over in one lump at
     * its next update, more than one short interval's budget, and the rest would be lost to
     * the floor (measured: rocev2.9's background in class 5, two phantoms above class 3, and
     * only the nearest brought up to date: 50,589 bytes below the real queue). So the program
     * brings up to three classes above a queue up to date, and the config allows no more
     * (QosConfig, phantom levels). A pause of this class only shortens its own drain (start),
     * and the classes above are still subtracted whole: the phantom can only stand above the
     * queue. Without any of it each class drained at the port's full rate, two busy lossless
     * classes twice the line rate between two resyncs (conformance case pfc.dual: 58,559
     * bytes below the real queue, past the 42,354 bytes of headroom). */
    action drain_under(bit<32> idx, bit<32> above, bit<32> rate_q20) {
        q_bytes.read(q, idx);
        q_time.read(last, idx);
        paused_until.read(pu, idx);
        served.read(sv_above, above);
        above_seen.read(seen, idx);
        served.read(sv, idx);
        bit<32> above_took = sv_above - seen;
        bit<48> start = (pu > last) ? pu : last;
        bit<64> left = (((bit<64>) (NOW |-| start) * (bit<64>) rate_q20) >> 20) |-|
                       (bit<64>) above_took;
        bit<32> q_was = q;
        q = (bit<32>) ((bit<64>) q |-| left);
        sv = sv + above_took + (q_was - q);
        served.write(idx, sv);
        above_seen.write(idx, sv_above);
    }

    /* The class above a queue brought up to date at `now` and stored, before the queue drains
     * with what it left (EMPTY_CELL, always empty, where no class is above). */
    action refresh_above(bit<32> above, bit<32> above2, bit<32> rate_q20) {
        drain_under(above, above2, rate_q20);
        q_bytes.write(above, q);
        q_time.write(above, NOW);
    }

    /* A data packet joins its queue (egress port, class), in one action, since BMv2 pays for
     * every table: the phantom is drained until now and grows by the packet's bytes, and so
     * does the count of bytes admitted (what a resync subtracts the kernel's released bytes
     * from). RED on the phantom decides the CE mark, for ECN-capable packets (Floyd and
     * Jacobson 1993, without the averaging, as switch ASICs do it on the instantaneous queue):
     * above Kmin with a probability rising linearly to Pmax at Kmax, always above Kmax. And
     * whether the packet took the queue past XOFF.
     * The entry's key is the packet's own (egress_spec, class): a data packet needs no step
     * to find its queue. Thresholds are in bytes, the rate in bytes per 2^20 us. A queue that
     * does not mark has kmin and kmax, and a lossy queue xoff, at THRESHOLD_NEVER: no flag
     * per feature to test on every packet. */
    action join(bit<32> kmin, bit<32> kmax, bit<32> pmax_slope, bit<32> xoff) {
        q = q + std_meta.packet_length;
        q_bytes.write(q_idx, q);
        q_time.write(q_idx, NOW);
        admitted.read(adm, q_idx);
        adm = adm + std_meta.packet_length;
        admitted.write(q_idx, adm);
        meta.lossless_data = 1;
        bit<16> r;
        random(r, 16w0, 16w0xffff);
        bit<64> p16 = ((bit<64>) (q - kmin) * (bit<64>) pmax_slope) >> 16;
        ce_mark = (hdr.ipv4.ecn != 0 && (q > kmax || (q > kmin && (bit<64>) r < p16)))
                  ? 1w1 : 1w0;
        xoff_due = (q > xoff) ? 1w1 : 1w0;
    }
    action admit(bit<32> idx, bit<32> rate_q20, bit<32> kmin, bit<32> kmax,
                 bit<32> pmax_slope, bit<32> xoff) {
        q_idx = idx;
        drain(q_idx, rate_q20);
        join(kmin, kmax, pmax_slope, xoff);
    }
    /* The same for a queue that shares its port with other profiled classes: the classes above
     * (cells `above`, `above2`, `above3`, nearest first; EMPTY_CELL where there are fewer) are
     * brought up to date first, top down, and this one drains with what the port left it. A
     * separate action, so that a port with one profiled class (the default fabric) pays
     * nothing for it. */
    action admit_shared(bit<32> idx, bit<32> above, bit<32> above2, bit<32> above3,
                        bit<32> rate_q20, bit<32> kmin, bit<32> kmax, bit<32> pmax_slope,
                        bit<32> xoff) {
        refresh_above(above2, above3, rate_q20);
        refresh_above(above, above2, rate_q20);
        q_idx = idx;
        drain_under(q_idx, above, rate_q20);
        above_of.write(q_idx, above);
        join(kmin, kmax, pmax_slope, xoff);
    }
    /* A queue without a profile keeps no phantom: it neither marks nor pauses. */
    action unprofiled() {
        q_idx = 0;  /* not used: only said so that the compiler sees it set */
        ce_mark = 0;
        xoff_due = 0;
    }
    table queue_profile {
        key = { std_meta.egress_spec: exact; meta.tc: exact; }
        actions = { admit; admit_shared; unprofiled; }
        default_action = unprofiled();
        size = PORT_TC_CELLS;
    }

    /* The agent's tick names its queue (egress port, class): the phantom drained until now,
     * and the queue's PFC settings for the tick's verdict. */
    action tick_queue(bit<32> idx, bit<32> rate_q20, bit<32> xon, bit<16> pause_quanta,
                      bit<48> refresh_us) {
        q_idx = idx;
        drain(q_idx, rate_q20);
        q_xon = xon;
        q_pause_quanta = pause_quanta;
        q_refresh_us = refresh_us;
        tick_valid = 1;
    }
    /* The same for a queue that shares its port with other profiled classes (admit_shared). */
    action tick_queue_shared(bit<32> idx, bit<32> above, bit<32> above2, bit<32> above3,
                             bit<32> rate_q20, bit<32> xon, bit<16> pause_quanta,
                             bit<48> refresh_us) {
        refresh_above(above2, above3, rate_q20);
        refresh_above(above, above2, rate_q20);
        q_idx = idx;
        drain_under(q_idx, above, rate_q20);
        above_of.write(q_idx, above);
        q_xon = xon;
        q_pause_quanta = pause_quanta;
        q_refresh_us = refresh_us;
        tick_valid = 1;
    }
    /* A tick for a queue without a profile: its phantom is the resync's level, and it sends
     * no PFC. */
    action tick_unprofiled() {
        q_idx = (bit<32>) hdr.tick.port * NUM_TCS + (bit<32>) hdr.tick.tc;
        q = 0;
        q_xon = 0;
        q_pause_quanta = 0;
        q_refresh_us = 0;
        tick_valid = 0;
    }
    table tick_profile {
        key = { hdr.tick.port: exact; hdr.tick.tc: exact; }
        actions = { tick_queue; tick_queue_shared; tick_unprofiled; }
        default_action = tick_unprofiled();
        size = PORT_TC_CELLS;
    }

    /* A pause (p_quanta > 0) or its end (p_quanta 0) for queue p_idx, at `now`, unless the
     * PFC watchdog has the queue ignore PFC. The phantom is first brought up to date: it
     * drained until this instant, and a pause that froze it as it stood at its last packet or
     * tick would lose that drain, so that the phantom stood above the real queue by the port's
     * rate times that gap, at every pause (measured before this: up to 50 KB at 10 Mbit/s,
     * about 25 ms of the link, between two resyncs).
     * A pause that begins (the class was not paused) also drains what the kernel gate lets
     * through as it closes (testbed.ports: a closed tbf still holds a burst of the largest
     * frame, two 4 KB RoCE frames with a 9000-byte MTU). Without it the phantom stood that
     * much above the kernel queue after every pause: measured 2 frames a pause, 30 KB between
     * two resyncs at 20 Mbit/s. An ignored class is only brought up to date: its paused_until
     * is written back as it was. Where the queue shares its port with profiled classes above
     * it, they are brought up to date first and the queue drains with what they left
     * (drain_under; with none above, EMPTY_CELL, it drains as drain() would). */
    action pause_queue() {
        above_of.read(p_above, p_idx);
        above_of.read(p_above2, p_above);
        above_of.read(p_above3, p_above2);
        refresh_above(p_above2, p_above3, port_rate);
        refresh_above(p_above, p_above2, port_rate);
        drain_under(p_idx, p_above, port_rate);
        bit<1> ignored;
        pfc_ignored.read(ignored, p_idx);
        bit<32> leak = (ignored == 0 && p_quanta != 0 && pu <= NOW) ? port_gate_leak : 32w0;
        bit<32> q_was = q;
        q = q |-| leak;
        served.write(p_idx, sv + (q_was - q));  /* what the gate let go took the port too */
        q_bytes.write(p_idx, q);
        q_time.write(p_idx, NOW);
        pu = (ignored == 1) ? pu : NOW +
            (bit<48>) (((bit<64>) p_quanta * (bit<64>) port_quantum) >> 10);
        paused_until.write(p_idx, pu);
    }

    /* An XOFF toward the port a data packet came from: the cell of that port and the
     * packet's class (p_idx), the quanta the XOFF asks for, and how often it is renewed while
     * the queue stays over XOFF. The pause lasts the quanta times 512 bit times of that
     * port's own link, so the renewal belongs to the ingress port, not to the queue. Applied
     * only to a packet that took its queue past XOFF. */
    action set_xoff(bit<32> base, bit<16> pause_quanta, bit<48> refresh_us) {
        p_idx = base + (bit<32>) meta.tc;
        q_pause_quanta = pause_quanta;
        q_refresh_us = refresh_us;
    }
    /* A port without one (none is left out): the longest pause, renewed by every packet. */
    action xoff_unprofiled() {
        p_idx = (bit<32>) std_meta.ingress_port * NUM_TCS + (bit<32>) meta.tc;
        q_pause_quanta = 0xFFFF;
        q_refresh_us = 0;
    }
    table xoff_profile {
        key = { std_meta.ingress_port: exact; }
        actions = { set_xoff; xoff_unprofiled; }
        default_action = xoff_unprofiled();
        size = NUM_PORTS;
    }

    apply {
        if (meta.lossless_kind == LOSSLESS_DATA) {
            /* A routed data packet: it joins its queue, if the queue has a profile. */
            queue_profile.apply();  /* admit: the phantom, ECN, and whether XOFF is due */
            if ((ce_mark | xoff_due) == 1) {  /* one test on the common path, not two */
                if (ce_mark == 1) {
                    ecn_marked.count(q_idx);
                    hdr.ipv4.ecn = 3;
                }
                /* PFC: over XOFF, pause the port the packet came from (renewed before the
                 * pause expires). */
                if (xoff_due == 1) {
                    xoff_profile.apply();
                    xoff_sent_at.read(last, p_idx);
                    paused_by.read(ports, q_idx);
                    bit<64> me = (bit<64>) 1 << (bit<8>) std_meta.ingress_port;
                    paused_by.write(q_idx, ports | me);
                    /* XOFF if this port is not paused on this queue's account (never, or an
                     * XON resumed it), or to renew a pause that is about to expire. */
                    if ((ports & me) == 0 || NOW - last > q_refresh_us) {
                        xoff_sent_at.write(p_idx, NOW);
                        meta.pfc_tc = meta.tc;
                        meta.pfc_quanta = q_pause_quanta;
                        meta.pfc_cause = (bit<16>) q_idx;
                        pfc_xoff_triggered.count(p_idx);
                        clone_preserving_field_list(CloneType.I2E,
                                                    (bit<32>) std_meta.ingress_port, FL_PFC);
                    }
                }
            }
        } else if (meta.lossless_kind == LOSSLESS_TICK) {
            /* The agent's tick for (port, class). A resync tick carries the kernel's
             * backlog: the phantom takes it and the drift is recorded. A timer tick
             * (backlog all ones) only asks the program to judge its own drained phantom.
             * Either way: XON if the queue drained, XOFF again if it is still full. */
            tick_profile.apply();
            ticks.count(q_idx);
            bit<32> level = q;
            if (hdr.tick.backlog != TICK_TIMER_ONLY) {
                level = hdr.tick.backlog;
                if (hdr.tick.sent != TICK_SENT_UNKNOWN) {
                    admitted.read(adm, q_idx);
                    bit<32> occupancy = adm - hdr.tick.sent;
                    /* below the backlog (or "negative"): counters out of step, e.g. a
                     * queue without a profile earlier; the kernel's backlog is a floor */
                    if (occupancy[31:31] == 0 && occupancy > level) {
                        level = occupancy;
                    }
                }
                drift.write(q_idx, q - level);
                held.write(q_idx, level - hdr.tick.backlog);
                occupancy_max.read(seen_max, q_idx);
                if (level > seen_max) {
                    occupancy_max.write(q_idx, level);
                }
                if (level > q) {
                    below_max.read(seen_max, q_idx);
                    if (level - q > seen_max) {
                        below_max.write(q_idx, level - q);
                    }
                }
            }
            q_bytes.write(q_idx, level);
            q_time.write(q_idx, NOW);
            paused_by.read(ports, q_idx);
            meta.pfc_ports = ports;
            meta.pfc_tc = (tc_t) hdr.tick.tc;
            meta.pfc_cause = (bit<16>) q_idx;
            if (ports == 0 || tick_valid == 0) {
                mark_to_drop(std_meta);
            } else if (level <= q_xon) {
                meta.pfc_quanta = 0;                  /* XON: the queue has drained */
                paused_by.write(q_idx, 0);
                std_meta.mcast_grp = PFC_MCAST_GROUP;
            } else {
                /* Above XON the pause holds (PFC's hysteresis): renew it before it
                 * expires, however long that takes -- this is what lets a cycle of full
                 * buffers deadlock, as on real switches. */
                refreshed_at.read(last, q_idx);
                if (NOW - last > q_refresh_us) {
                    refreshed_at.write(q_idx, NOW);
                    meta.pfc_quanta = q_pause_quanta;
                    std_meta.mcast_grp = PFC_MCAST_GROUP;
                } else {
                    mark_to_drop(std_meta);
                }
            }
        } else if (meta.lossless_kind == LOSSLESS_PFC) {
            /* A PFC frame from the peer of this port: the phantoms of its classes stop draining
             * for the pause time (the agent closes the kernel gates). */
            ingress_port_quantum.apply();
            bit<32> base = (bit<32>) std_meta.ingress_port * NUM_TCS;
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
        /* no `return` here: p4c makes a flag of each, one more field BMv2 resets per packet */
        if (is_replica &&
            ((meta.pfc_ports >> (bit<8>) std_meta.egress_port) & 1) == 0) {
            mark_to_drop(std_meta);
        } else if (is_clone || is_replica) {
            hdr.ethernet.dst_addr = PFC_DST_MAC;
            hdr.ethernet.ether_type = ETHERTYPE_MAC_CONTROL;
            port_mac.apply();
            hdr.pfc.setValid();
            hdr.pfc.opcode = MAC_CONTROL_PFC;
            hdr.pfc.class_enable = (bit<16>) 1 << (bit<8>) meta.pfc_tc;
            hdr.pfc_cause.setValid();
            hdr.pfc_cause.queue = meta.pfc_cause;
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
}

#endif
