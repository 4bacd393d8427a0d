"""The TCP endpoint: the same flows and collectives over the hosts' kernel TCP (mode ``tcp``).

A scenario in mode ``tcp`` starts this endpoint in place of the RoCE one (``python -m
traffic.endpoint --transport tcp``, whose ``main`` starts, runs and stops either). It answers
the same control commands and writes the same files, so the runner, the summary and the
headline read a TCP run as they read a RoCE one; what differs is below them: each "QP" is a
TCP connection, and the kernel's TCP (its congestion control, RFC 3168 ECN, its own timers and
retransmissions) carries it through the same BMv2 fabric and queues, in the class the flow
names (its DSCP in the IP header: ``IP_TOS``).

* A requester connects to the peer's port :data:`TCP_PORT` and first writes the responder's
  QP number (4 bytes), so that the listener knows which flow it serves; then each message as a
  4-byte length and its bytes (zeros: TCP carries them intact, checked by its own checksum).
* A message is complete once the kernel says every byte of it was acknowledged (``SIOCOUTQ``,
  tcp(7): bytes written and not yet acknowledged), polled every :data:`ACK_POLL_S` while
  messages are in flight; the responder counts a message when its last byte is read, which is
  what a collective's next step waits on (:mod:`traffic.chain`).
* The counters come from the kernel (``TCP_INFO``, linux/tcp.h): segments sent and
  retransmitted. TCP keeps no count of its timeouts a socket can read, so ``timeouts`` is 0.

Host faults (storm, slow receiver, rx_loss) are RoCE NIC behaviours and are refused in this mode
by the scenario; this endpoint sends no PFC and obeys none (mode ``tcp`` runs without PFC).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import select
import socket
import struct
import time
from collections import deque

from traffic.credits import XmitWait
from traffic.endpoint_config import EndpointConfig
from traffic.endpoint_control import ControlServer
from traffic.endpoint_qps import QpState, QpTable
from traffic.endpoint_telemetry import EndpointStats, Telemetry
from traffic.qp import Message, RequesterStats, ResponderStats
from traffic.wire import NUM_TCS

log = logging.getLogger("roce.tcp_endpoint")

#: The port every host's listener takes (the port RDMA perftest's TCP exchange uses).
TCP_PORT = 18515
#: A connection's first word (the responder QP number) and each message's header (its size).
WORD = struct.Struct("!I")
#: How often a sender looks for acknowledged bytes while messages are in flight: a message's
#: completion time is late by up to this (a 32 KiB message lasts 26 ms at 10 Mbit/s).
ACK_POLL_S = 0.002
#: Bytes handed to the kernel per send() call.
CHUNK = 65536
_ZEROS = memoryview(bytes(CHUNK))
SIOCOUTQ = 0x5411  # linux/sockios.h (TIOCOUTQ): bytes not yet acknowledged, for TCP
#: TCP_INFO (linux/tcp.h struct tcp_info): the offsets of the counters read.
TCPI_TOTAL_RETRANS = 100  # __u32 tcpi_total_retrans
TCPI_DATA_SEGS_OUT = 156  # __u32 tcpi_data_segs_out (Linux 4.6)
TCP_INFO_LEN = 160


class TcpSender:
    """The sending side of a flow's connection: the requester's part (posts, completions and
    counters, as :class:`traffic.qp.Requester` has them)."""

    def __init__(self, sock: socket.socket, header: bytes) -> None:
        self.sock = sock
        self.stats = RequesterStats()
        self.pending: deque[Message] = deque()
        self._pending_offset = 0  # bytes of the head message (with its header) written
        #: Messages whose bytes have all been written, not yet all acknowledged: (end, msg),
        #: ``end`` the stream offset just past the message.
        self.unacked: deque[tuple[int, Message]] = deque()
        self.cursor = 0  # the control server's halt resets it; TCP has none
        self.completed: list[Message] = []
        self._msg_ids = 0
        self._head = header  # what goes first: the connection's word, then a message header
        self.written = 0  # bytes the kernel took, headers included
        self.blocked = False  # the socket's buffer was full at the last write
        self._payload_done = 0  # payload bytes of the completed messages

    def post(self, kind: str, size: int, now: float) -> Message:
        if size <= 0:
            raise ValueError("message size must be positive")
        self._msg_ids += 1
        m = Message(self._msg_ids, kind, size, 0, now)
        self.pending.append(m)
        return m

    def has_work(self) -> bool:
        return bool(self.pending) or bool(self._head)

    @property
    def idle(self) -> bool:
        return not self.pending and not self.unacked

    def write(self) -> None:
        """Hand the kernel what its send buffer takes."""
        self.blocked = False
        while self._head or self.pending:
            if self._head:
                chunk: bytes | memoryview = self._head
            else:
                m = self.pending[0]
                if self._pending_offset == 0:
                    self._head = WORD.pack(m.size)
                    self._pending_offset = WORD.size
                    continue
                chunk = _ZEROS[:min(CHUNK, WORD.size + m.size - self._pending_offset)]
            try:
                n = self.sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                self.blocked = True
                return
            except OSError as exc:  # refused or reset: its messages are flushed, as a QP's
                log.warning("connection failed: %s", exc)
                self.stats.retry_exceeded = 1
                self.stats.messages_flushed += len(self.pending)
                self.pending.clear()
                self._head = b""
                return
            self.written += n
            if self._head:
                self._head = self._head[n:]
                continue
            self._pending_offset += n
            m = self.pending[0]
            if self._pending_offset >= WORD.size + m.size:
                self.pending.popleft()
                self._pending_offset = 0
                self.unacked.append((self.written, m))

    def poll(self, now: float) -> None:
        """Complete the messages every byte of which was acknowledged; read the counters."""
        outq = struct.unpack("i", fcntl.ioctl(self.sock, SIOCOUTQ, b"\0" * 4))[0]
        acked = self.written - outq
        while self.unacked and self.unacked[0][0] <= acked:
            _end, m = self.unacked.popleft()
            m.completed_at = now
            self.completed.append(m)
            self.stats.messages_completed += 1
            self._payload_done += m.size
        self.stats.bytes_acked = self._payload_done
        info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        if len(info) >= TCP_INFO_LEN:
            self.stats.retransmitted = struct.unpack_from("I", info, TCPI_TOTAL_RETRANS)[0]
            self.stats.packets_sent = struct.unpack_from("I", info, TCPI_DATA_SEGS_OUT)[0]
        self.stats.bytes_sent = self.written

    # what the endpoint's housekeeping asks of a RoCE requester: the kernel keeps TCP's timers
    def check_timeout(self, now: float, paused_s: float | None = None) -> bool:
        return False

    def timeout_at(self, now: float) -> float:
        return float("inf")


class TcpReceiver:
    """The receiving side: counts bytes and whole messages (:class:`traffic.qp.Responder`'s
    counters)."""

    def __init__(self) -> None:
        self.stats = ResponderStats()
        self.epsn = 0
        self._word = b""  # a message header's bytes read so far
        self._left = 0  # payload bytes of the current message still to come

    def take(self, data: memoryview) -> int:
        """Read ``data``; how many messages it completed."""
        done, i, n = 0, 0, len(data)
        while i < n:
            if self._left == 0:
                need = WORD.size - len(self._word)
                self._word += bytes(data[i:i + need])
                i += min(need, n - i)
                if len(self._word) == WORD.size:
                    self._left = WORD.unpack(self._word)[0]
                    self._word = b""
                continue
            take = min(self._left, n - i)
            self._left -= take
            i += take
            self.stats.bytes += take
            if self._left == 0:
                self.stats.messages += 1
                done += 1
        return done


class TcpEndpoint(QpTable, Telemetry, ControlServer):
    """One host's flows over kernel TCP, with the RoCE endpoint's control and files."""

    def __init__(self, cfg: EndpointConfig, clock=time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self.t0 = cfg.t0_monotonic if cfg.t0_monotonic is not None else clock()
        self.stats = EndpointStats()
        self._init_qps()
        self.paused_until = [0.0] * NUM_TCS  # never paused: no PFC in this mode
        self.credit_wait = [XmitWait() for _ in range(NUM_TCS)]  # nor credit
        self.fault = {"mode": "none"}
        self._running = True
        self._next_housekeeping = 0.0
        self._buf = bytearray(1 << 18)
        self._conns: dict[socket.socket, QpState] = {}  # accepted connections, by socket
        self._hello: dict[socket.socket, bytes] = {}  # accepted, QP word not yet read
        self._open_telemetry()
        if cfg.tcp_ecn:  # RFC 3168 ECN on this host's connections (its own namespace's)
            with open("/proc/sys/net/ipv4/tcp_ecn", "w") as fh:
                fh.write("1")
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((cfg.ip, TCP_PORT))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self._open_control()

    def now(self) -> float:
        return self.clock() - self.t0

    def paused_seconds(self, tc: int, now: float) -> float:
        return 0.0

    def held_seconds(self, tc: int, now: float) -> float:
        return 0.0

    def _count_socket_drops(self) -> None:
        """The kernel's TCP loses nothing at the host's socket: nothing to count."""

    def set_fault(self, **_req) -> dict:
        raise ValueError("host faults are RoCE NIC behaviours: none in mode tcp")

    def create_qp(self, qpn: int, role: str, peer_ip: str, peer_qpn: int, tc: int = 3,
                  rate_cap_mbps: float | None = None, **_roce) -> QpState:
        """A responder waits for its connection; a requester opens one now, marked with its
        class's DSCP and paced at its rate cap (``SO_MAX_PACING_RATE``)."""
        if qpn in self.qps:
            raise ValueError(f"QP {qpn} exists")
        if tc not in self.cfg.tc_to_dscp:
            raise ValueError(f"class {tc} has no DSCP on this host (--tc-dscp)")
        st = QpState(qpn, role, tc, peer_ip, peer_qpn, 0,
                     rate_cap_bps=rate_cap_mbps * 1e6 if rate_cap_mbps else None)
        if role == "responder":
            st.responder = TcpReceiver()  # type: ignore[assignment]
        elif role == "requester":
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.cfg.tc_to_dscp[tc] << 2)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION,
                         self.cfg.tcp_congestion.encode())
            if rate_cap_mbps:
                s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_MAX_PACING_RATE", 47),
                             int(rate_cap_mbps * 1e6 / 8))
            s.bind((self.cfg.ip, 0))
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect((peer_ip, TCP_PORT))
            st.requester = TcpSender(s, WORD.pack(peer_qpn))  # type: ignore[assignment]
            self._requesters.append(st)
        else:
            raise ValueError("role must be 'requester' or 'responder'")
        self.qps[qpn] = st
        return st

    # -- the loop -------------------------------------------------------------------------
    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            c, _ = self.listener.accept()
            c.setblocking(False)
            self._hello[c] = b""

    def _read(self, c: socket.socket, now: float) -> bool:
        """Read what waits on an accepted connection; False once it closed."""
        try:
            n = c.recv_into(self._buf)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            n = 0
        if n == 0:
            return False
        data = memoryview(self._buf)[:n]
        if c in self._hello:  # the connection's first word says which responder it feeds
            word = self._hello[c] + bytes(data[:WORD.size - len(self._hello[c])])
            data = data[WORD.size - len(self._hello[c]):]
            if len(word) < WORD.size:
                self._hello[c] = word
                return True
            del self._hello[c]
            st = self.qps.get(WORD.unpack(word)[0])
            if st is None or st.responder is None:
                self.stats.unknown_qp += 1
                return False
            self._conns[c] = st
        st = self._conns[c]
        if st.responder.take(data) and st.chains:  # type: ignore[union-attr]
            self._release_chains(st, now)
        return True

    def _housekeeping(self, now: float) -> float:
        """Duration flows' refills and the senders' completions: the next look."""
        busy = False
        for st in self._requesters:
            req = st.requester
            if st.post_until > now and len(req.pending) < 2:
                req.post(st.post_kind, st.post_size, now)
            if req.unacked or req.pending or st.post_until > now:
                busy = True
                req.poll(now)  # type: ignore[union-attr]  # an idle sender's counters stand
                self._log_completions(st)
        return now + ACK_POLL_S if busy else now + 0.05

    def _housekeeping_by(self, when: float) -> None:
        if when < self._next_housekeeping:
            self._next_housekeeping = when

    def run(self, until: float | None = None) -> None:
        while self._running:
            now = self.now()
            if until is not None and now >= until:
                break
            for st in self._requesters:
                if st.requester.has_work():
                    st.requester.write()  # type: ignore[union-attr]
            if now >= self._next_housekeeping:
                self._next_housekeeping = self._housekeeping(now)
            if now >= self._next_sample:
                self.sample(now)
            wake = min(self._next_housekeeping, self._next_sample)
            writers = [st.requester.sock for st in self._requesters  # type: ignore[union-attr]
                       if st.requester.blocked]  # type: ignore[union-attr]
            readers = [self.listener, self.ctl, *self.clients, *self._hello, *self._conns]
            rd, _wr, _ = select.select(readers, writers, [], max(0.0, min(wake - now, 0.05)))
            now = self.now()
            for s in rd:
                if s is self.listener:
                    self._accept()
                elif s is self.ctl:
                    self._accept_client(readers)
                elif s in self.clients:
                    if not self._serve_client(s):
                        s.close()
                elif not self._read(s, now):
                    self._conns.pop(s, None)
                    self._hello.pop(s, None)
                    s.close()

    def close(self) -> None:
        for st in self._requesters:
            st.requester.poll(self.now())  # type: ignore[union-attr]
            self._log_completions(st)
        self.sample(force=True)
        for s in [self.listener, *self._conns, *self._hello,
                  *(st.requester.sock for st in self._requesters)]:  # type: ignore[union-attr]
            with contextlib.suppress(OSError):
                s.close()
        self._close_control()
        self._close_telemetry()
