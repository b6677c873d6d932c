"""``lbdl serve [SPEC|DIR]``: the studio, a spec's figure, costs and errors as you type."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import sys
from pathlib import Path

from lbdl_dsl.core.errors import LbdlError

EXTRAS = ("serve",)
HELP = "edit specs in the browser: the figure, summary and errors follow the text as you type"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        nargs="?",
        default=".",
        metavar="SPEC|DIR",
        help="a spec to open (its folder is served) or a folder of specs (default: .)",
    )
    p.add_argument("--port", type=int, default=8765, help="the port (default 8765; 0: any free)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1, this machine only)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the longest one check may take before it is stopped (default 10)",
    )
    p.add_argument(
        "--workers", type=int, default=2, help="checks run at once, each in a process (default 2)"
    )


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def free(host: str, port: int) -> None:
    """Refuse a port already taken (or an address not of this machine) before any worker
    starts, with the user's words rather than uvicorn's log line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except (TypeError, UnicodeError, ValueError):  # not text a host name can be
            raise LbdlError(
                f"--host {host!r}: not a host name or an address",
                hint="give an address of this machine, such as 127.0.0.1",
            ) from None
        except OSError as exc:
            raise LbdlError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                hint="--port 0 picks a free port"
                if exc.errno == errno.EADDRINUSE
                else "give an address of this machine with --host",
            ) from None


def locate(target: str) -> tuple[Path, str | None]:
    """The folder to serve and the spec to open first."""
    path = Path(target)
    if path.is_dir():
        return path.resolve(), None
    if path.is_file() and path.suffix == ".lbdl":
        return path.resolve().parent, path.name
    raise LbdlError(
        f"{target}: not a spec or a folder",
        hint="give a .lbdl file to open, or the folder of specs to serve",
    )


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from lbdl_dsl.serve.app import LOOPBACK, create_app
        from lbdl_dsl.serve.server import config, port_of
    except ModuleNotFoundError as exc:  # the one message every verb gives for a missing extra
        from lbdl_dsl.cli.common import missing_extra

        missing = missing_extra(exc)
        if missing is None:
            raise
        print(f"lbdl serve: {missing.render()}", file=sys.stderr)
        return 1
    try:
        root, first = locate(args.target)
    except LbdlError as err:
        print(err.render(), file=sys.stderr)
        return 1
    if not 0 <= args.port <= 65535 or not 0 < args.timeout <= 3600 or not 1 <= args.workers <= 64:
        args.parser.error(
            "--port is 0 to 65535, --timeout above 0 and at most 3600 s, --workers 1 to 64"
        )
    try:
        free(args.host, args.port)
    except LbdlError as err:
        print(err.render(), file=sys.stderr)
        return 1
    local = loopback(args.host)
    if not local:
        print(
            f"warning: listening on {args.host}: any machine that reaches it can read and "
            f"write the specs in {root}; the studio has no login",
            file=sys.stderr,
        )
    app = create_app(
        root, first, workers=args.workers, timeout=args.timeout, hosts=LOOPBACK if local else None
    )
    server = uvicorn.Server(config(app, args.host, args.port))
    shown = f"[{args.host}]" if ":" in args.host else args.host

    def announce() -> None:
        port = port_of(server) if server.servers else args.port
        tail = f"#{first}" if first else ""
        print(f"lbdl studio: serving {root}\n  http://{shown}:{port}/{tail}", flush=True)

    original = server.startup

    async def startup(sockets=None) -> None:  # type: ignore[no-untyped-def]
        await original(sockets)
        if server.started:
            announce()

    server.startup = startup  # type: ignore[method-assign]
    server.run()
    return 0
