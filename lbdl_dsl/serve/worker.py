"""Checks in worker processes with a time limit: a spec can never hang the server.

The compiler's own limits (`compiler.limits`) bound what a spec may ask for, but a spec that
asks for the most of everything still takes seconds, and a bug of ours could take forever.
So each view (`views`) runs in one of a few worker processes, started in the served folder;
a worker that does not answer within the time limit is killed and replaced, and the request
gets an error that says so. The server's own process never parses a spec.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

Result = dict[str, Any]

MEMORY = 8 * 1024**3
"""Bytes of address space one worker may map: a check needs a few hundred MB, an ONNX download
of a mid-sized model a few GB; beyond that the worker fails alone (and is replaced), never
the machine it shares."""

DEFAULT_TIMEOUT = 10.0
"""Seconds one check may take (resnet50 takes 0.1 s; the fuzzer's worst cases a few)."""


def _serve(conn: Connection, root: str) -> None:
    """The worker's loop: one request, one answer, in the served folder. The worker leads a
    process group of its own, so that stopping it also stops the Graphviz it may be running."""
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = MEMORY if hard == resource.RLIM_INFINITY else min(MEMORY, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    os.chdir(root)
    from lbdl_dsl.serve import views

    while True:
        try:
            seq, name, args = conn.recv()
        except (EOFError, OSError):
            return
        start = time.perf_counter()
        try:
            result = getattr(views, name)(**args)
        except RecursionError:
            result = _error("the spec nests too deeply to check", "")
        except MemoryError:
            result = _error("the check ran out of memory", "")
        except Exception as exc:  # noqa: BLE001 - our bug: an error for the page, not a crash
            result = _error(
                f"internal error: {type(exc).__name__}: {exc}",
                "this is a bug in lbdl, not in your spec; please report it",
            )
        result["worker_ms"] = round((time.perf_counter() - start) * 1000, 1)
        conn.send((seq, result))
        views.prepare()


def _error(message: str, hint: str) -> Result:
    text = message + (f"\nhint: {hint}" if hint else "")
    return {
        "ok": False,
        "diagnostics": [{"message": message, "hint": hint or None, "span": None, "text": text}],
    }


class Worker:
    """One process and the pipe to it; its calls block, so they run in a thread."""

    def __init__(self, root: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, str(root)), daemon=True)
        self.proc.start()
        child.close()
        self.seq = 0
        self.stopping = threading.Lock()  # a replacement and the server's shutdown may both stop it

    def call(self, name: str, args: dict[str, Any], timeout: float) -> Result:
        self.seq += 1
        self.conn.send((self.seq, name, args))
        while self.conn.poll(timeout):
            seq, result = self.conn.recv()
            if seq == self.seq:
                return dict(result)
        raise TimeoutError(name)

    def stop(self) -> None:
        """Kill the worker and what it started (a `dot` laying out a figure). Once: a second
        call, from another thread, finds the pipe closed and does nothing (two threads closing
        one descriptor was an EBADF at shutdown, when a replacement was under way)."""
        with self.stopping:
            if self.conn.closed:
                return
            if self.proc.pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError, ValueError):
                self.proc.kill()
            self.proc.join(5)
            self.conn.close()


class Pool:
    """A few workers shared by every request; ``size`` of them run at once, the rest wait."""

    def __init__(self, root: Path, size: int = 2, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.root = root
        self.size = size
        self.timeout = timeout
        self.idle: asyncio.Queue[Worker] = asyncio.Queue()
        self.all: list[Worker] = []
        self.lock = threading.Lock()
        self.restarts = 0

    def _spawn(self) -> Worker:
        worker = Worker(self.root)
        worker.call("warm", {}, 120.0)
        with self.lock:
            self.all.append(worker)
        return worker

    async def start(self) -> None:
        for worker in await asyncio.gather(
            *(asyncio.to_thread(self._spawn) for _ in range(self.size))
        ):
            self.idle.put_nowait(worker)

    async def call(self, name: str, timeout: float | None = None, **args: Any) -> Result:
        """``views.name(**args)`` in a worker; an error result when it takes too long. The
        work goes on to its end even if the request is cancelled (a closed page), so that a
        worker is never handed back while it is still busy."""
        job = asyncio.ensure_future(self._run(name, args, timeout or self.timeout))
        return await asyncio.shield(job)

    async def _run(self, name: str, args: dict[str, Any], timeout: float) -> Result:
        worker = await self.idle.get()
        try:
            result = await asyncio.to_thread(worker.call, name, args, timeout)
        except (TimeoutError, EOFError, OSError) as exc:
            asyncio.ensure_future(self._replace(worker))
            if isinstance(exc, TimeoutError):
                return _error(
                    f"the check took longer than {timeout:g} s and was stopped",
                    "the spec asks for too much work; make it smaller (fewer or smaller ×N "
                    "groups, fewer boxes opened)",
                )
            return _error("the check's worker stopped", "this is a bug in lbdl; please report it")
        self.idle.put_nowait(worker)
        return result

    async def _replace(self, worker: Worker) -> None:
        """A new worker for one that overran or died; tried again a few times, so that a
        passing shortage (memory, processes) does not leave the pool one worker short."""
        self.restarts += 1
        await asyncio.to_thread(worker.stop)  # once, if a shutdown stops it meanwhile too
        with self.lock:
            if worker in self.all:
                self.all.remove(worker)
        for attempt in range(5):
            try:
                self.idle.put_nowait(await asyncio.to_thread(self._spawn))
                return
            except (OSError, EOFError, TimeoutError) as exc:
                print(
                    f"lbdl serve: could not start a worker ({exc}); trying again", file=sys.stderr
                )
                await asyncio.sleep(2**attempt)

    def close(self) -> None:
        with self.lock:
            workers, self.all = self.all, []
        for worker in workers:
            worker.stop()
