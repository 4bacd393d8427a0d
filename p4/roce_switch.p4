/* roce-testbed switch: a RoCEv2 fabric switch for BMv2 simple_switch (v1model).
 *
 * Files: headers.p4 (headers, metadata, constants), parser.p4 (parser, checksums, deparser),
 * lossless.p4 (phantom queues, ECN marking, PFC generation), ingress.p4 (classification, ECMP
 * routing, PFC consumption, counters), egress.p4 (counters, PFC frame construction).
 * Build: see p4/Makefile; the compiled JSON and P4Info are committed beside this file.
 */
#include <core.p4>
#include <v1model.p4>

#include "headers.p4"
#include "parser.p4"
#include "lossless.p4"
#include "ingress.p4"
#include "egress.p4"

V1Switch(
    RoceParser(),
    RoceVerifyChecksum(),
    RoceIngress(),
    RoceEgress(),
    RoceComputeChecksum(),
    RoceDeparser()
) main;
