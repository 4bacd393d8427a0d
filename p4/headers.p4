/* Headers and metadata of the roce-testbed switch program. */
#ifndef _ROCE_HEADERS_P4_
#define _ROCE_HEADERS_P4_

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<9>  port_t;
typedef bit<3>  tc_t;

const bit<16> ETHERTYPE_IPV4        = 0x0800;
const bit<16> ETHERTYPE_MAC_CONTROL = 0x8808;   /* IEEE 802.3 MAC control: PAUSE and PFC */
const bit<16> MAC_CONTROL_PFC       = 0x0101;   /* IEEE 802.1Qbb priority-based flow control */
const bit<8>  IP_PROTO_UDP          = 17;
const bit<8>  IP_PROTO_TCP          = 6;
const bit<16> UDP_PORT_ROCEV2       = 4791;
const bit<16> ETHERTYPE_TICK        = 0x88B6;   /* IEEE local experimental: the agent's tick */
const bit<16> ETHERTYPE_KICK        = 0x88B7;   /* the agents' kicks and plugs (testbed.machine.ports) */
const bit<16> ETHERTYPE_CREDIT      = 0x88B5;   /* mode ib-credit's flow control packets (traffic.credits) */
/* Where set_nexthop writes a forwarded frame's ingress port in its source MAC: byte 2
 * (testbed.config.constants.INPUT_MAC_BYTE), which every switch port's MAC leaves zero. */
#define INPUT_MAC_SHIFT 24
const bit<48> PFC_DST_MAC           = 0x0180C2000001;
const bit<16> PFC_MCAST_GROUP       = 1;        /* every port but the agent's */
const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;
const bit<32> PKT_INSTANCE_TYPE_REPLICATION   = 5;
#define FL_PFC 1
/* What the lossless control is asked to do with a packet (meta.lossless_kind). */
const bit<2>  LOSSLESS_NONE = 0;
const bit<2>  LOSSLESS_PFC  = 1;   /* a PFC frame received */
const bit<2>  LOSSLESS_TICK = 2;   /* the agent's tick */
const bit<2>  LOSSLESS_DATA = 3;   /* a routed data packet */
const bit<9>  AGENT_PORT            = 500;      /* the switch agent's own port */
const bit<32> TICK_TIMER_ONLY       = 0xFFFFFFFF; /* a tick without a kernel backlog */
const bit<32> TICK_SENT_UNKNOWN     = 0xFFFFFFFF; /* a resync tick without the sent counter */
const bit<32> THRESHOLD_NEVER       = 0xFFFFFFFF; /* a queue threshold no queue reaches */

/* Counter arrays are indexed by port * NUM_TCS + class. */
const bit<32> NUM_TCS   = 8;
const bit<32> NUM_PORTS = 512;
#define PORT_TC_CELLS 4096
/* The cell of port 0, class 0: no switch port is numbered 0, so it never holds a queue and
 * stays empty. A queue with no profiled class above it on its port names it as that class. */
const bit<32> EMPTY_CELL = 0;

header ethernet_h {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

/* IEEE 802.1Qbb PFC frame body after the EtherType. */
header pfc_h {
    bit<16> opcode;
    bit<16> class_enable;   /* bit i = priority i */
    bit<16> time0;
    bit<16> time1;
    bit<16> time2;
    bit<16> time3;
    bit<16> time4;
    bit<16> time5;
    bit<16> time6;
    bit<16> time7;
}

/* The switch agent's tick for one (egress port, class): the kernel's backlog of that queue, and
 * the bytes the kernel has let go of since the port was made (sent, plus dropped), modulo 2^32:
 * with what the program admitted into the queue, the occupancy of the switch's whole buffer. */
header tick_h {
    bit<16> port;
    bit<8>  tc;
    bit<32> backlog;
    bit<32> sent;
}

header ipv4_h {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

/* The first word of a TCP header: its ports, all ECMP's hash reads of it (the rest of the
 * header passes through as payload). Switches hash TCP's 5-tuple as they hash UDP's. */
header tcp_ports_h {
    bit<16> src_port;
    bit<16> dst_port;
}

/* InfiniBand Base Transport Header, as carried by RoCEv2. */
header bth_h {
    bit<8>  opcode;
    bit<1>  solicited;
    bit<1>  mig_req;
    bit<2>  pad_count;
    bit<4>  version;
    bit<16> pkey;
    bit<1>  fecn;
    bit<1>  becn;
    bit<6>  reserved;
    bit<24> dest_qp;
    bit<1>  ack_req;
    bit<7>  reserved2;
    bit<24> psn;
}

/* Ours, after a PFC frame's eight pause times, in what 802.1Qbb leaves as padding (a receiver
 * ignores it; it held the clone's payload bytes before): the egress queue (port * NUM_TCS +
 * class) on whose account this switch sent the frame. The switch agent sees every frame its
 * switch sends, and ticks that queue alone; without it, it ticked every port's queue of the
 * class after each XOFF (three ticks in five under a 4:1 incast were those). */
header pfc_cause_h {
    bit<16> queue;
}

struct headers_t {
    ethernet_h ethernet;
    pfc_h      pfc;
    pfc_cause_h pfc_cause;
    tick_h     tick;
    ipv4_h     ipv4;
    udp_h      udp;
    tcp_ports_h tcp;
    bth_h      bth;
}

/* Drop reasons, exported in the drop counter (index = port * 16 + reason). */
const bit<32> DROP_NOT_IPV4    = 1;
const bit<32> DROP_PARSE_ERROR = 2;
const bit<32> DROP_TTL_EXPIRED = 3;
const bit<32> DROP_NO_ROUTE    = 4;
const bit<32> DROP_PFC_CONSUMED = 5;  /* not a loss: PFC frames are consumed by the switch */
const bit<32> DROP_BAD_CHECKSUM = 6;
const bit<32> NUM_DROP_REASONS = 16;
#define DROP_CELLS 8192

struct metadata_t {
    tc_t        tc;
    bit<1>      drop;
    bit<32>     drop_reason;
    /* ECMP selector inputs: packet fields masked by the hash configuration, plus a seed. */
    bit<16>     hash_seed;
    ipv4_addr_t hash_src_addr;
    ipv4_addr_t hash_dst_addr;
    bit<8>      hash_protocol;
    bit<16>     hash_src_port;
    bit<16>     hash_dst_port;
    bit<16>     l4_src_port;
    bit<16>     l4_dst_port;
    /* What the lossless control is asked to do with the packet (set by ingress), and whether
     * it admitted the packet into a lossless queue (egress times BMv2's hold of those). The
     * lossless control's own variables live in it, not here: see RoceLossless. */
    bit<2>      lossless_kind;
    bit<1>      lossless_data;
    /* What a PFC frame made from this packet says: class, quanta (0 = XON), the queue on
     * whose account (pfc_cause_h), target ports. */
    @field_list(FL_PFC) tc_t    pfc_tc;
    @field_list(FL_PFC) bit<16> pfc_quanta;
    @field_list(FL_PFC) bit<16> pfc_cause;
    bit<64>     pfc_ports;
}

#endif
