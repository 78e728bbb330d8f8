"""A host-side relay from a Unix socket to one TCP address: how a sandbox with no network of its own reaches
exactly one server (the instance's shop server) and nothing else. The socket file is bound into the
sandbox; a forwarder inside it (`FORWARDER`) listens on the server's own loopback address there, so URLs
stay the same on both sides.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

# Runs inside the sandbox (stdlib only): 127.0.0.1:<port> there -> the relay's Unix socket.
FORWARDER = '''
import socket as _socket, threading as _threading


def _coevo_pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass


def _coevo_loopback_up():
    """Bring `lo` up where the sandbox's network namespace left it down (the rlimit backend's `unshare --net`;
    bwrap brings it up itself). Without the right to, nothing changes."""
    import fcntl, struct
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]  # SIOCGIFFLAGS
        if not flags & 1:
            fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP
    except OSError:
        pass
    finally:
        s.close()


def _coevo_forward(port, path):
    """Forward 127.0.0.1:port (0: any free port) to the Unix socket `path`; returns the port."""
    _coevo_loopback_up()
    listener = _socket.socket()
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))

    def connect():
        up = _socket.socket(_socket.AF_UNIX)
        up.connect(path)
        return up

    _coevo_relay(listener, connect)
    return listener.getsockname()[1]


def _coevo_relay(listener, connect):
    """Accept on the bound `listener` (in a thread) and pipe each client to `connect()`; a client whose
    connection cannot be made is closed."""
    listener.listen(64)

    def serve():
        while True:
            conn, _ = listener.accept()
            try:
                up = connect()
            except OSError:
                conn.close()
                continue
            _threading.Thread(target=_coevo_pipe, args=(conn, up), daemon=True).start()
            _threading.Thread(target=_coevo_pipe, args=(up, conn), daemon=True).start()

    _threading.Thread(target=serve, daemon=True).start()
'''


def _pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class UnixRelay:
    """Accepts on `path` (mode 0666, for the sandbox uid) and connects each client to (host, port)."""

    def __init__(self, path: Path, host: str, port: int) -> None:
        self.path, self.target = Path(path), (host, port)
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(str(self.path))
        self.path.chmod(0o666)
        self._sock.listen(64)
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, name="coevo-unix-relay", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            try:
                up = socket.create_connection(self.target, timeout=10)
                up.settimeout(None)
            except OSError:
                conn.close()
                continue
            self._open += [conn, up]
            threading.Thread(target=_pipe, args=(conn, up), daemon=True).start()
            threading.Thread(target=_pipe, args=(up, conn), daemon=True).start()

    def close(self) -> None:
        for s in (self._sock, *self._open):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._thread.join(timeout=5)
