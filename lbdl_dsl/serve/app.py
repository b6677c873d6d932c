"""The studio's server: a thin Starlette skin over `views`, run in `worker` processes.

The page is static assets (`static/`, the editor bundled by esbuild from ``web/``) and one
socket, on which it sends the text as it is typed and gets back the checker's answer. Plain
HTTP routes do the rest: the list of specs, reading and saving one (`folder`), the diff, the
downloads. The server keeps no state but the files it was given; every request is bounded in
size (`MAX_BODY`) and in time (the worker's limit).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from lbdl_dsl.compiler.limits import MAX_SOURCE_BYTES
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.serve import folder
from lbdl_dsl.serve.worker import DEFAULT_TIMEOUT, Pool

STATIC = Path(__file__).parent / "static"

MAX_BODY = MAX_SOURCE_BYTES + 64 * 1024
"""The largest request body (or socket message): a spec at the compiler's own size limit, and
the settings that come with it."""

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")

DOWNLOAD_TIMEOUT = 120.0
"""Seconds a download may take: the ONNX export imports JAX and traces the model."""


class TooLarge(Exception):
    pass


class Guard:
    """ASGI middleware: a request body beyond `MAX_BODY` is refused (413) as it arrives, and a
    request from another site's page (its ``Origin``) or for another host name (DNS
    rebinding) is refused (403), so that only the studio's own page can use the server."""

    def __init__(self, app: ASGIApp, hosts: tuple[str, ...] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if not self._allowed(headers):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            else:
                await JSONResponse({"error": "refused: not the studio's page"}, 403)(
                    scope, receive, send
                )
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        length = headers.get("content-length", "0") or "0"
        if not length.isdigit() or int(length) > MAX_BODY:
            await _too_large(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > MAX_BODY:
                raise TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except TooLarge:
            await _too_large(scope, receive, send)

    def _allowed(self, headers: dict[str, str]) -> bool:
        host = urlsplit(f"//{headers.get('host', '')}").hostname or ""
        origin = headers.get("origin")
        origin_host = (urlsplit(origin).hostname or "") if origin else host
        if self.hosts is None:  # beyond loopback (--host): any name, but the page's own origin
            return origin_host == host
        return host in self.hosts and origin_host in self.hosts


async def _too_large(scope: Scope, receive: Receive, send: Send) -> None:
    message = f"request body over the limit of {MAX_BODY:,} bytes"
    await JSONResponse({"error": message}, 413)(scope, receive, send)


def _fail(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status)


def _settings(body: dict[str, Any]) -> dict[str, Any]:
    """The checked part of a request: ``set`` as strings (read as ``--set`` values by the
    compiler), ``expand`` as names."""
    overrides = body.get("set") or {}
    expand = body.get("expand") or []
    if not isinstance(overrides, dict) or not isinstance(expand, list):
        raise LbdlError("`set` is an object of K: V and `expand` a list of names")
    return {
        "overrides": {str(k): str(v) for k, v in overrides.items() if str(v).strip()},
        "expand": [str(e) for e in expand],
    }


class Studio:
    """The routes' handlers over one served folder and its worker pool."""

    def __init__(self, root: Path, first: str | None, pool: Pool) -> None:
        self.root, self.first, self.pool = root, first, pool

    def spec(self, body: dict[str, Any]) -> tuple[str, str]:
        """The ``path`` and ``text`` of a request: a spec's name inside the folder, its text."""
        name, text = body.get("path"), body.get("text")
        if not isinstance(name, str) or not isinstance(text, str):
            raise LbdlError("give `path` and `text` as strings")
        folder.resolve(self.root, name, must_exist=False)
        return name, text

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    async def files(self, request: Request) -> Response:
        listing = folder.listing(self.root)
        return JSONResponse({"root": self.root.name, "files": listing, "first": self.first})

    async def read(self, request: Request) -> Response:
        name = request.query_params.get("path", "")
        return JSONResponse({"path": name, "text": folder.read(self.root, name)})

    async def save(self, request: Request) -> Response:
        name, text = self.spec(await _body(request))
        if len(text.encode()) > MAX_SOURCE_BYTES:
            return _fail(f"a spec is at most {MAX_SOURCE_BYTES:,} bytes", 413)
        target = folder.write(self.root, name, text)
        return JSONResponse({"ok": True, "path": name, "bytes": target.stat().st_size})

    async def check(self, request: Request) -> Response:
        body = await _body(request)
        name, text = self.spec(body)
        result = await self.pool.call("check", path=name, text=text, **_settings(body))
        return JSONResponse(result)

    async def diff(self, request: Request) -> Response:
        body = await _body(request)
        sides = []
        for key in ("a", "b"):
            side = body.get(key)
            if not isinstance(side, dict):
                raise LbdlError("give `a` and `b`, each with `path`, `text` and `set`")
            sides.append((*self.spec(side), _settings(side)["overrides"]))
        expand = _settings(body)["expand"]
        return JSONResponse(await self.pool.call("diff", a=sides[0], b=sides[1], expand=expand))

    async def download(self, request: Request) -> Response:
        body = await _body(request)
        name, text = self.spec(body)
        fmt = str(body.get("format", ""))
        result = await self.pool.call(
            "download", DOWNLOAD_TIMEOUT, path=name, text=text, fmt=fmt, **_settings(body)
        )
        if not result["ok"]:
            return JSONResponse(result, 422)
        disposition = f'attachment; filename="{result["name"]}"'
        return Response(
            base64.b64decode(result["data"]),
            media_type=result["type"],
            headers={"content-disposition": disposition},
        )

    async def socket(self, ws: WebSocket) -> None:
        """One page's checks: each message is the text as typed; only the newest waiting one
        is checked (a fast typist's older keystrokes are dropped), its answer tagged with the
        message's ``id``."""
        await ws.accept()
        latest: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1)
        task = asyncio.ensure_future(self._answer(ws, latest))
        try:
            while True:
                raw = await ws.receive_text()
                if len(raw) > MAX_BODY:
                    await ws.close(1009)
                    return
                body = json.loads(raw)
                if not isinstance(body, dict):
                    continue
                with contextlib.suppress(asyncio.QueueEmpty):
                    latest.get_nowait()
                latest.put_nowait(body)
        except (WebSocketDisconnect, json.JSONDecodeError):
            pass
        finally:
            task.cancel()

    async def _answer(self, ws: WebSocket, latest: asyncio.Queue[dict[str, Any]]) -> None:
        while True:
            body = await latest.get()
            try:
                name, text = self.spec(body)
                result = await self.pool.call("check", path=name, text=text, **_settings(body))
            except LbdlError as err:
                message = err.first.message
                result = {"ok": False, "diagnostics": [{"message": message, "text": message}]}
            await ws.send_text(json.dumps({"id": body.get("id"), **result}))

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.index),
            Route("/api/files", self.files),
            Route("/api/file", self.read, methods=["GET"]),
            Route("/api/file", self.save, methods=["PUT"]),
            Route("/api/check", self.check, methods=["POST"]),
            Route("/api/diff", self.diff, methods=["POST"]),
            Route("/api/download", self.download, methods=["POST"]),
            WebSocketRoute("/ws", self.socket),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]


def create_app(
    root: Path,
    first: str | None = None,
    *,
    workers: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    hosts: tuple[str, ...] | None = LOOPBACK,
) -> Starlette:
    """The studio for the specs under ``root``; ``first`` is the spec the page opens;
    ``hosts``: the host names the page may be reached by (None: any, beyond loopback)."""
    root = Path(root).resolve()
    pool = Pool(root, workers, timeout)
    studio = Studio(root, first, pool)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.start()
        try:
            yield
        finally:
            pool.close()

    handlers = {LbdlError: _refused}
    app = Starlette(routes=studio.routes(), lifespan=lifespan, exception_handlers=handlers)
    app.state.pool = pool
    app.add_middleware(Guard, hosts=hosts)
    return app


async def _refused(request: Request, exc: Exception) -> Response:
    status = 403 if isinstance(exc, folder.Refused) else 400
    return _fail(str(exc.first.message if isinstance(exc, LbdlError) else exc), status)


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LbdlError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise LbdlError("the request body is a JSON object")
    return body
