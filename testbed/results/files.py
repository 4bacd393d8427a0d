"""Every name in a results folder, defined once: what a run, a sweep and a comparison write,
and the subfolders they write into (docs/RESULTS.md documents each file).

Writers and readers take the names from here, so a file cannot be written under one name and
looked for under another. tests/test_structure.py fails if any of these names is written as a
string literal outside this package. The endpoints' own files (``qp_timeseries.csv``,
``messages.csv``) are named by their writer, :mod:`traffic.endpoint_telemetry`, since traffic/
imports nothing of the testbed; they are re-exported here.

Two files share the name ``summary.json``: :data:`SUMMARY_FILE` (a scenario run's, at the top
of its folder) and :data:`FABRIC_SUMMARY_FILE` (the fabric's, in ``telemetry/``); each has its
own constant so that a reader says which one it means.
"""

from __future__ import annotations

from traffic.endpoint_telemetry import MESSAGES_FILE as MESSAGES_FILE
from traffic.endpoint_telemetry import QP_FILE as QP_FILE

# -- a run's folder ------------------------------------------------------------------------------

#: The resolved topology (testbed.topology.graph's JSON), written as a run starts.
TOPOLOGY_FILE = "topology.json"
#: The validated fabric config, written as a run starts.
CONFIG_FILE = "config.json"
#: A scenario run's scenario as run (flows, faults, extras), for its readers.
SCENARIO_FILE = "scenario.json"
#: A scenario run's summary at the top of its folder: the headline, the deadlock section, the
#: budget, the fidelity verdict, the captures (testbed.run.scenario_run writes it).
SUMMARY_FILE = "summary.json"
#: The P4 counters sampled over a scenario run (testbed.run.counter_sampler).
P4_COUNTERS_FILE = "p4_counters.csv"
#: report.png, report.md and report.html (testbed.report).
REPORT_PNG_FILE = "report.png"
REPORT_MD_FILE = "report.md"
REPORT_HTML_FILE = "report.html"

#: The subfolder of the switch agents' files and the CPU samples.
TELEMETRY_DIR = "telemetry"
#: The fabric's summary in :data:`TELEMETRY_DIR`, written by every run (`up` too) as it ends:
#: the fidelity verdict and its figures (testbed.run.lifecycle). Not :data:`SUMMARY_FILE`.
FABRIC_SUMMARY_FILE = "summary.json"
#: Every core's load over the run, in :data:`TELEMETRY_DIR` (testbed.run.cpuload).
CPU_FILE = "cpu.csv"
#: Per switch, in :data:`TELEMETRY_DIR`: the agent's samples and events, its log.
TELEMETRY_SUFFIX = ".telemetry.csv"
EVENTS_SUFFIX = ".events.csv"
AGENT_LOG_SUFFIX = ".agent.log"
#: The log of the one agent process that serves every switch (agent.one_process).
AGENTS_LOG_FILE = "agents.log"
#: Per switch, in the fabric's runtime folder (not the results folder): the watchdog's state.
PFCWD_SUFFIX = ".pfcwd.json"

#: The subfolder of the switches' BMv2 logs (``<switch>.log``).
LOGS_DIR = "logs"
#: The subfolder of the hosts' endpoints: ``<host>.log`` and a folder per host holding
#: :data:`QP_FILE` and :data:`MESSAGES_FILE`.
ENDPOINTS_DIR = "endpoints"
#: The subfolder of the packet captures (testbed.run.capture).
CAPTURES_DIR = "captures"
#: The subfolder of the best-effort background flows (testbed.fabric.background): per flow,
#: what its sender sent (``<flow>`` + :data:`BACKGROUND_SENT_SUFFIX`) and what its receiver
#: counted (``<flow>`` + :data:`BACKGROUND_RECEIVED_SUFFIX`).
BACKGROUND_DIR = "background"
BACKGROUND_SENT_SUFFIX = ".sent.json"
BACKGROUND_RECEIVED_SUFFIX = ".received.json"
#: Every log's suffix: a switch's BMv2 log, a host's endpoint log.
LOG_SUFFIX = ".log"

# -- a sweep's folder ----------------------------------------------------------------------------

#: The sweep's plan and its runs' folders (testbed.run.sweep_run); marks a folder as a sweep.
SWEEP_FILE = "sweep.json"
#: Each figure's median and range per point.
SWEEP_TABLE_MD_FILE = "table.md"
SWEEP_TABLE_CSV_FILE = "table.csv"
#: One row per run.
SWEEP_RUNS_FILE = "runs.csv"
SWEEP_PNG_FILE = "sweep.png"

# -- a conformance run's folder (testbed.conformance) ------------------------------------------

#: One JUnit test case per expected result of every case run.
CONFORMANCE_JUNIT_FILE = "junit.xml"
#: The table of every expected result and each case's scaling.
CONFORMANCE_MD_FILE = "conformance.md"
#: The selection, fabric and scaling of the run, and every result, as JSON.
CONFORMANCE_JSON_FILE = "conformance.json"
#: The subfolder of the cases' run folders (``<plan>.<case>/``, each a scenario run's folder).
CONFORMANCE_CASES_DIR = "cases"

# -- a comparison's folder -----------------------------------------------------------------------

COMPARE_MD_FILE = "compare.md"
COMPARE_CSV_FILE = "compare.csv"
COMPARE_PNG_FILE = "compare.png"

#: Every fixed file name above (not the folders, not the suffixes): what no module outside the
#: results package may write as a literal.
FILE_NAMES = frozenset({
    TOPOLOGY_FILE, CONFIG_FILE, SCENARIO_FILE, SUMMARY_FILE, P4_COUNTERS_FILE, REPORT_PNG_FILE,
    REPORT_MD_FILE, REPORT_HTML_FILE, FABRIC_SUMMARY_FILE, CPU_FILE, AGENTS_LOG_FILE,
    QP_FILE, MESSAGES_FILE, SWEEP_FILE, SWEEP_TABLE_MD_FILE, SWEEP_TABLE_CSV_FILE,
    SWEEP_RUNS_FILE, SWEEP_PNG_FILE, COMPARE_MD_FILE, COMPARE_CSV_FILE, COMPARE_PNG_FILE})
