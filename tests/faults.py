"""Fault injection over real sockets: a TCP proxy in front of PostgreSQL or Redis that can go down or freeze.

Point the process under test at `proxy.port` instead of the real server, then:

- `down()`: close every open connection and refuse new ones (what a stopped server looks like);
- `freeze()`: keep connections open but hold every byte in both directions (a hung server or a
  partitioned network: calls block until their own timeout);
- `slow(seconds)`: deliver every chunk `seconds` late, in both directions (a slow network or a loaded
  server: each answer comes, only late);
- `restore()`: accept and forward again, without delay (held bytes are delivered in order after a freeze).

Nothing here mocks the server: the client library speaks its real protocol to the real server,
only the path between them fails.
"""

from __future__ import annotations

import socket
import threading
import time


class FaultProxy:
    def __init__(self, target_host: str, target_port: int, *, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._down = False
        self._delay = 0.0
        self._conns: set[socket.socket] = set()
        self.url = ""  # set by for_redis()
        self._listener = self._listen(listen_port)
        self.port = self._listener.getsockname()[1]
        self._accept_thread = threading.Thread(target=self._accept_loop, args=(self._listener,), daemon=True)
        self._accept_thread.start()

    # -- controls ------------------------------------------------------------------
    def down(self) -> None:
        """Refuse new connections and reset the open ones."""
        with self._lock:
            self._down = True
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        self._flowing.set()  # let frozen pumps wake up and see their sockets closed
        if listener is not None:
            _close(listener)
        for conn in conns:
            _close(conn)

    def freeze(self) -> None:
        """Hold all traffic: connections stay open, nothing is delivered either way."""
        self._flowing.clear()

    def slow(self, seconds: float) -> None:
        """Deliver each chunk `seconds` after it arrives (fault injection: a slow path, not a synchronisation)."""
        self._delay = seconds

    def restore(self) -> None:
        """Forward again, without delay; after `down()`, listen again on the same port."""
        with self._lock:
            reopen = self._down
            self._down = False
            self._delay = 0.0
        if reopen:
            listener = self._listen(self.port)
            with self._lock:
                self._listener = listener
            threading.Thread(target=self._accept_loop, args=(listener,), daemon=True).start()
        self._flowing.set()

    @classmethod
    def for_redis(cls, redis_url: str) -> FaultProxy:
        """A proxy in front of the Redis at `redis_url`; `proxy.url` is the same database reached through it."""
        from urllib.parse import urlsplit

        target = urlsplit(redis_url)
        proxy = cls(target.hostname or "127.0.0.1", target.port or 6379)
        proxy.url = f"redis://127.0.0.1:{proxy.port}{target.path or '/0'}"
        return proxy

    def close(self) -> None:
        self.down()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------
    @staticmethod
    def _listen(port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        return sock

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # listener closed by down()/close()
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._down:
                    _close(client)
                    _close(upstream)
                    continue
                self._conns.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if self._delay:
                    time.sleep(self._delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
