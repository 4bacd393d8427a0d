"""The endpoint's control server: a unix socket taking one JSON object per line and answering
one per line (see :mod:`traffic.client`). Commands: ``qp`` (create a QP), ``post`` (messages
to send), ``stats``, ``fault``, ``halt`` (drop what every QP had to send) and ``stop``."""

from __future__ import annotations

import contextlib
import json
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from traffic.endpoint_config import EndpointConfig
    from traffic.endpoint_qps import QpState


class ControlServer:
    """Part of :class:`traffic.endpoint.Endpoint`: its control socket and commands. Uses the
    endpoint's ``cfg``, ``qps``, ``now()``, ``create_qp()``, ``snapshot()``, ``set_fault()``
    and ``_housekeeping_by()`` (a command that adds or drops work has housekeeping look at
    once: it sets its deadlines from the work there is); ``stop`` clears its ``_running``."""

    cfg: EndpointConfig
    qps: dict[int, QpState]
    _requesters: list[QpState]
    chain_post: Callable[..., None]
    _running: bool

    def _open_control(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.cfg.control_socket.unlink()
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ctl.bind(str(self.cfg.control_socket))
        self.ctl.listen(8)
        self.ctl.setblocking(False)
        self.clients: dict[socket.socket, bytes] = {}

    def _close_control(self) -> None:
        for s in [self.ctl, *self.clients]:
            with contextlib.suppress(OSError):
                s.close()
        with contextlib.suppress(FileNotFoundError):
            self.cfg.control_socket.unlink()

    def _accept_client(self, socks: list[socket.socket]) -> None:
        """A client is connecting: watch its socket from now on (``socks``, the loop's)."""
        with contextlib.suppress(BlockingIOError):
            c, _ = self.ctl.accept()
            self.clients[c] = b""
            socks.append(c)

    def handle(self, req: dict) -> dict:
        cmd = req.get("cmd")
        now = self.now()
        if cmd in ("qp", "post", "halt"):
            self._housekeeping_by(now)
        if cmd == "qp":
            args = {k: req[k] for k in ("qpn", "role", "peer_ip", "peer_qpn", "tc", "sport",
                                        "rate_cap_mbps", "start_psn", "max_outstanding", "rto_s",
                                        "ack_tc")
                    if k in req}
            st = self.create_qp(**args)
            return {"ok": True, "qpn": st.qpn, "sport": st.sport}
        if cmd == "post":
            st = self.qps.get(req["qpn"])
            if st is None or st.requester is None:
                raise ValueError(f"no requester QP {req['qpn']}")
            kind, size = req.get("kind", "write"), int(req["size"])
            if "after" in req:  # a collective's step: each message waits on arrivals
                self.chain_post(st, kind, size, int(req["count"]), [int(q) for q in req["after"]],
                                now)
            elif "duration_s" in req:  # keep posting messages until the duration ends
                st.post_until, st.post_kind, st.post_size = now + float(req["duration_s"]), \
                    kind, size
                st.requester.post(kind, size, now)
            else:
                for _ in range(int(req.get("count", 1))):
                    st.requester.post(kind, size, now)
            return {"ok": True}
        if cmd == "stats":
            return {"ok": True, **self.snapshot()}
        if cmd == "fault":
            return {"ok": True, "fault": self.set_fault(**{k: v for k, v in req.items()
                                                           if k != "cmd"})}
        if cmd == "halt":  # the application stops: every QP drops what it had to send
            for st in self._requesters:
                st.post_until = 0.0
                st.requester.pending.clear()
                st.requester._pending_offset = 0
                st.requester.unacked.clear()
                st.requester.cursor = 0
            return {"ok": True}
        if cmd == "stop":
            self._running = False
            return {"ok": True}
        raise ValueError(f"unknown cmd {cmd!r}; use qp, post, stats, fault, halt or stop")

    def _serve_client(self, c: socket.socket) -> bool:
        """Answer the complete command lines waiting on ``c``; False once the client has gone."""
        try:
            data = c.recv(65536)  # a blocking socket, read only when epoll says it is readable
        except OSError:
            data = b""
        if not data:
            self.clients.pop(c, None)
            return False
        buf = self.clients[c] + data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                resp = self.handle(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                resp = {"ok": False, "error": str(exc)}
            with contextlib.suppress(OSError):
                c.sendall(json.dumps(resp).encode() + b"\n")
        self.clients[c] = buf
        return True
