"""Talk to a running endpoint over its unix socket: one JSON object per line each way.

From the Mininet CLI: ``h1 python -m traffic.client /run/roce-testbed/<run>/h1.ep stats``.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path


class EndpointError(Exception):
    pass


class EndpointClient:
    def __init__(self, path: str | Path, timeout: float = 5.0) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise EndpointError(f"no endpoint answers at {self.path}") from None
                time.sleep(0.02)
        self._buf = b""
        # One request at a time: the flow runner's thread starts flows while the run's own
        # thread asks for stats (its progress display) on the same socket.
        self._lock = threading.Lock()

    def call(self, **req) -> dict:
        with self._lock:
            try:
                self.sock.sendall(json.dumps(req).encode() + b"\n")
                while b"\n" not in self._buf:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        raise EndpointError("endpoint closed the connection")
                    self._buf += chunk
            except OSError as exc:  # it died, or stopped answering within the timeout
                raise EndpointError(f"endpoint stopped answering ({exc})") from None
            line, self._buf = self._buf.split(b"\n", 1)
        resp = json.loads(line)
        if not resp.get("ok"):
            raise EndpointError(resp.get("error", "unknown error"))
        return resp

    def wait(self, predicate, timeout: float, poll: float = 0.1) -> dict:
        """Poll stats until ``predicate(stats)`` holds; return the last stats."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.call(cmd="stats")
            if predicate(st) or time.monotonic() > deadline:
                return st
            time.sleep(poll)

    def close(self) -> None:
        self.sock.close()


def main() -> None:
    if len(sys.argv) < 3:
        print("usage: python -m traffic.client SOCKET CMD [key=value ...]  "
              "(CMD: qp, post, stats, fault, stop)", file=sys.stderr)
        sys.exit(2)
    req: dict = {"cmd": sys.argv[2]}
    for kv in sys.argv[3:]:
        k, _, v = kv.partition("=")
        try:
            req[k] = json.loads(v)
        except json.JSONDecodeError:
            req[k] = v
    try:
        print(json.dumps(EndpointClient(sys.argv[1]).call(**req), indent=1))
    except EndpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
