"""Run the front under uvicorn, the engine thread beside it; SIGTERM (or Ctrl-C) drains before the exit.

Draining: new requests get 503 (and /health says so) while the queued and running ones finish; after
`drain_s` those still unfinished fail with 503, then the server closes. A second Ctrl-C exits at once.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.serve.protocol import ApiError

DEFAULT_DRAIN_S = 30.0
INSTALL_HINT = "Install them with: pip install 'cugraph-accel[serve]' (or pip install fastapi uvicorn)."


def require_server_packages() -> None:
    """One line when the `serve` extra is missing, before any model is loaded."""
    missing = []
    for name in ("fastapi", "uvicorn"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise BadOptionError(f"serve needs {' and '.join(missing)}, which {verb} not installed.", INSTALL_HINT)


def make_server(app, scheduler, host: str, port: int, drain_s: float = DEFAULT_DRAIN_S, log_level: str = "warning"):
    """A uvicorn server of `app` whose SIGTERM and SIGINT drain `scheduler` first (see the module docstring)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        drain_started = False

        def handle_exit(self, sig, frame) -> None:  # signal.signal's handler, on the main thread
            if self.drain_started:
                if sig == signal.SIGINT:  # a second Ctrl-C: now
                    self.force_exit = self.should_exit = True
                return
            self.drain_started = True
            loop = asyncio.get_event_loop()
            # the task is kept: the loop holds only a weak reference to it
            loop.call_soon_threadsafe(lambda: setattr(self, "drain_task", loop.create_task(self._drain())))

        async def _drain(self) -> None:
            scheduler.drain()
            deadline = time.monotonic() + drain_s
            while scheduler.in_flight() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if scheduler.in_flight():
                scheduler.abort(
                    ApiError(503, f"the server shut down: this request did not finish within {drain_s:g} s.")
                )
                await asyncio.sleep(0.2)  # the failures reach their clients
            self.should_exit = True

    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5, lifespan="off", access_log=False
    )
    return DrainingServer(config)


def serve(app, scheduler, host: str, port: int, drain_s: float, on_listening: Callable[[int], None] | None = None):
    """Serve until drained; `on_listening(port)` once the socket is bound (port 0 picks a free one)."""
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise BadOptionError(
            f"cannot listen on {host}:{port}: {err.strerror}.", "Choose another {port} or {host}."
        ) from err
    sock.listen(2048)  # connections wait in the backlog from now until uvicorn's loop accepts them
    server = make_server(app, scheduler, host, sock.getsockname()[1], drain_s)
    scheduler.start()
    if on_listening is not None:
        on_listening(sock.getsockname()[1])
    try:
        server.run(sockets=[sock])
    finally:
        scheduler.close()
        sock.close()
