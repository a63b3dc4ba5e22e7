"""A TCP proxy a test can cut: the network between one client and the broker, made partitionable.

`cut()` is a partition, not a refusal: connections stay open and accepted, but no byte crosses in
either direction (as when a link or a switch fails), so the client sees timeouts, not resets.
`heal()` lets bytes through again, held ones included, in order.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time


class TcpProxy:
    def __init__(self, listen_port: int, target_port: int, host: str = "127.0.0.1"):
        self.target = (host, target_port)
        self.server = socket.create_server((host, listen_port), reuse_port=False)
        self.server.setblocking(False)
        self._open = threading.Event()
        self._open.set()
        self._stop = False
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._held: dict[socket.socket, bytearray] = {}  # bytes read while cut, per destination
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.server, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name=f"proxy-{listen_port}", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        for sock in list(self._pairs):
            sock.close()
        self.server.close()

    def _run(self) -> None:
        while not self._stop:
            for key, _ in self._selector.select(timeout=0.05):
                sock = key.fileobj
                if sock is self.server:
                    self._accept()
                else:
                    self._pump(sock)
            if self._open.is_set():
                for dest, data in list(self._held.items()):
                    if data:
                        self._send(dest, bytes(data))
                        data.clear()

    def _accept(self) -> None:
        try:
            client, _ = self.server.accept()
        except BlockingIOError:
            return
        upstream = socket.create_connection(self.target)
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._selector.register(sock, selectors.EVENT_READ)
        self._pairs[client], self._pairs[upstream] = upstream, client
        self._held[client], self._held[upstream] = bytearray(), bytearray()

    def _pump(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        dest = self._pairs.get(sock)
        if dest is None:
            return
        if not data:
            self._drop(sock)
            return
        if self._open.is_set() and not self._held[dest]:
            self._send(dest, data)
        else:
            self._held[dest].extend(data)

    def _send(self, dest: socket.socket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = dest.send(view)
                view = view[sent:]
            except BlockingIOError:
                time.sleep(0.001)  # the receiver's window is full: a test's traffic is small
            except OSError:
                self._drop(dest)
                return

    def _drop(self, sock: socket.socket) -> None:
        other = self._pairs.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self._pairs.pop(s, None)
            self._held.pop(s, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(s)
            s.close()
