"""uvicorn, configured once for the studio: the command runs it in the foreground, the tests and
the benchmarks in a thread of their own (`Background`) on a free port."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from lbdl_dsl.serve.app import MAX_BODY


def config(app: Any, host: str, port: int) -> uvicorn.Config:
    """A socket message is bounded as a request body is; the sans-I/O websockets protocol
    is the one the websockets library keeps (its legacy one warns on import)."""
    return uvicorn.Config(
        app, host=host, port=port, log_level="warning", ws="websockets-sansio", ws_max_size=MAX_BODY
    )


def port_of(server: uvicorn.Server) -> int:
    return int(server.servers[0].sockets[0].getsockname()[1])


class Background:
    """``with Background(app) as url:`` the app served on a free loopback port in a thread."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = uvicorn.Server(config(app, host, port))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.host = host

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the studio's server did not start")
            time.sleep(0.05)
        return f"http://{self.host}:{port_of(self.server)}"

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self.thread.join(30)
