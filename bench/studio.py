"""The studio under use and abuse (docs/studio.md, docs/performance.md "The studio").

- ``latency``: from a keystroke in the page to the updated figure shown, in Debian's chromium
  driven by Playwright, for specs/resnet50.lbdl and specs/gpt2.lbdl: each keystroke types a
  digit into a model parameter (``classes=1000`` → ``10001``, ``L=1024`` → ``10241``) or
  deletes it again, and the clock stops when the page shows the figure of that text.
- ``load``: N clients (default 20), each on its own socket as the page's, sending edits of
  resnet50 and gpt2 for S seconds (default 60) to a loopback ``lbdl serve``: every answer
  counted, failures (no answer, a socket error, the worker's time limit) listed, latency
  percentiles reported.
- ``fuzz``: the fuzzer's mutations (bench/fuzz.py) of every spec, sent as edits: every one
  must be answered (a figure or the checker's error) and the server must still be running.

Run: ``python bench/studio.py latency|load|fuzz|all [--out FILE.json]``. The server is a real
``lbdl serve`` process on a scratch copy of specs/, started and stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (spec, the header's text to edit, the digit typed after it): one keystroke adds the digit,
# the next deletes it; each changes a number the figure shows. resnet50's count assertion goes:
# any other number of classes would fail it, and the benchmark times figures, not errors.
EDITS = {
    "resnet50.lbdl": ("classes=1000", "1"),
    "gpt2.lbdl": ("L=1024", "1"),
}


def scratch() -> Path:
    """A copy of specs/ to serve, resnet50 without its count assertion."""
    root = Path(tempfile.mkdtemp(prefix="lbdl-studio-bench-")) / "specs"
    shutil.copytree(ROOT / "specs", root)
    spec = root / "resnet50.lbdl"
    spec.write_text(
        "".join(line for line in spec.read_text().splitlines(True) if "assert params" not in line)
    )
    return root


class Server:
    """``lbdl serve ROOT --port 0`` in a process of its own; its URL from what it prints."""

    def __init__(self, root: Path, workers: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-m", "lbdl_dsl", "serve", str(root), "--port", "0"]
        self.proc = subprocess.Popen(
            [*cmd, "--workers", str(workers)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        self.proc.stdout.readline()
        self.url = self.proc.stdout.readline().strip().rstrip("/")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def stats(ms: list[float]) -> dict[str, Any]:
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 0.5), 1),
        "p95_ms": round(pct(ms, 0.95), 1),
        "max_ms": round(max(ms), 1),
        "mean_ms": round(statistics.fmean(ms), 1),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- latency in the page -----------------------------------------------------------------------


def latency(server: Server, keystrokes: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    out: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for spec, (anchor, digit) in EDITS.items():
            page.goto(f"{server.url}/#{spec}")
            page.wait_for_selector("#figure svg g.linked", timeout=60_000)
            at = page.evaluate(f"() => studio.view.state.doc.toString().indexOf({anchor!r})")
            page.evaluate(
                f"() => {{ studio.view.focus(); studio.view.dispatch("
                f"{{selection: {{anchor: {at + len(anchor)}}}}}); }}"
            )
            ms: list[float] = []
            parts: dict[str, list[float]] = {"in_page": [], "to_send": [], "worker": []}
            parts |= {"socket_and_server": [], "to_paint": []}
            for i in range(keystrokes + 2):
                before = int(page.evaluate("() => Number(document.body.dataset.checked || 0)"))
                key = digit if i % 2 == 0 else "Backspace"
                t0 = time.perf_counter()
                page.keyboard.press(key)
                page.wait_for_function(
                    "prev => Number(document.body.dataset.checked) > prev"
                    " && !document.body.dataset.checking"
                    " && document.body.dataset.state === 'ok'"
                    " && document.querySelector('#figure').dataset.svgOf.endsWith("
                    "'#' + document.body.dataset.checked)",
                    arg=before,
                    polling="raf",
                    timeout=60_000,
                )
                if i >= 2:  # the first two warm the worker and the page
                    ms.append((time.perf_counter() - t0) * 1000)
                    t = page.wait_for_function(
                        "() => studio.timing.latest && studio.timing.latest.key === "
                        "studio.timing.key && studio.timing.latest",
                        timeout=60_000,
                    ).json_value()
                    parts["in_page"].append(t["ms"])
                    parts["to_send"].append(t["sent"] - t["key"])
                    parts["worker"].append(t["worker_ms"])
                    parts["socket_and_server"].append(t["answered"] - t["sent"] - t["worker_ms"])
                    parts["to_paint"].append(t["painted"] - t["answered"])
            shown = page.inner_text("#figure")
            assert anchor.split("=")[1] in shown.replace(",", ""), "the figure follows the text"
            out[spec] = stats(ms)
            # where the time goes, as the page's own clock splits it (medians, ms): the key to
            # its check sent, the check in the worker, the socket and the server around it,
            # the answer to the next frame with its figure
            out[spec]["parts_p50_ms"] = {k: round(pct(v, 0.5), 1) for k, v in parts.items()}
            out[spec]["parts_p95_ms"] = {k: round(pct(v, 0.95), 1) for k, v in parts.items()}
        browser.close()
    return out


# -- many clients ---------------------------------------------------------------------------------


async def _client(url: str, texts: list[tuple[str, str]], until: float, rng: random.Random):
    import websockets

    ms: list[float] = []
    failures: list[str] = []
    async with websockets.connect(
        url.replace("http", "ws", 1) + "/ws",
        max_size=None,
        origin=url,  # as the page's own socket
    ) as ws:
        n = 0
        while time.monotonic() < until:
            path, text = rng.choice(texts)
            n += 1
            t0 = time.perf_counter()
            try:
                await ws.send(json.dumps({"id": n, "path": path, "text": text}))
                answer = json.loads(await asyncio.wait_for(ws.recv(), 60))
            except Exception as exc:  # noqa: BLE001 - counted, reported
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            ms.append((time.perf_counter() - t0) * 1000)
            if answer.get("id") != n or not answer.get("ok"):
                failures.append(str(answer.get("diagnostics"))[:200])
    return ms, failures


def edits_of(root: Path, rng: random.Random, n: int) -> list[tuple[str, str]]:
    """Valid edits of resnet50 and gpt2: their parameter changed to another valid value."""
    out = []
    for _ in range(n):
        spec, (anchor, _) = rng.choice(sorted(EDITS.items()))
        key, value = anchor.split("=")
        new = f"{key}={int(value) + rng.randrange(1, 64) * (32 if key != 'classes' else 1)}"
        out.append((spec, (root / spec).read_text().replace(anchor, new, 1)))
    return out


def load(server: Server, root: Path, clients: int, seconds: float) -> dict[str, Any]:
    rng = random.Random(0)
    texts = edits_of(root, rng, 200)
    until = time.monotonic() + seconds

    async def everyone():
        return await asyncio.gather(
            *(_client(server.url, texts, until, random.Random(i)) for i in range(clients))
        )

    t0 = time.perf_counter()
    results = asyncio.run(everyone())
    wall = time.perf_counter() - t0
    ms = [m for r, _ in results for m in r]
    failures = [f for _, fs in results for f in fs]
    return {
        "clients": clients,
        "seconds": round(wall, 1),
        "requests": len(ms) + len(failures),
        "failed": len(failures),
        "failures": failures[:10],
        "per_second": round(len(ms) / wall, 1),
        **stats(ms),
        "server_alive": server.alive(),
    }


# -- the fuzzer's edits ---------------------------------------------------------------------------


def fuzz(server: Server, cases: int, seed: int) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    sys.path.insert(0, str(ROOT / "bench"))
    import fuzz as fuzzer  # bench/fuzz.py

    corpus = fuzzer.load_corpus()
    ok = refused = limit = unanswered = 0
    ms: list[float] = []
    problems: list[str] = []
    for i in range(cases):
        case = fuzzer._mutate_case(random.Random(f"{seed}:{i}"), i, corpus)
        ((target, data),) = case.files.items()
        body = json.dumps({"path": target, "text": data.decode("utf-8", "replace")}).encode()
        request = urllib.request.Request(
            f"{server.url}/api/check",
            data=body,
            headers={"content-type": "application/json"},
            method="POST",
        )
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=120) as reply:
                answer = json.loads(reply.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            unanswered += 1
            problems.append(f"case {i} ({case.what}): {exc}")
            if not server.alive():
                break
            continue
        ms.append((time.perf_counter() - t0) * 1000)
        if answer["ok"]:
            ok += 1
        elif "longer than" in answer["diagnostics"][0]["message"]:
            limit += 1
            problems.append(f"case {i} ({case.what}): the time limit")
        else:
            refused += 1
            if "internal error" in answer["diagnostics"][0]["message"]:
                problems.append(f"case {i} ({case.what}): {answer['diagnostics'][0]['message']}")
    return {
        "cases": cases,
        "answered": ok + refused + limit,
        "figures": ok,
        "errors": refused,
        "time_limit": limit,
        "unanswered": unanswered,
        "problems": problems[:20],
        **stats(ms),
        "server_alive": server.alive(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("latency", "load", "fuzz", "all"))
    p.add_argument("--keystrokes", type=int, default=60)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    root = scratch()
    server = Server(root, args.workers)
    results: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": load_average()}
    try:
        if args.what in ("latency", "all"):
            results["latency"] = latency(server, args.keystrokes)
        if args.what in ("load", "all"):
            results["load"] = load(server, root, args.clients, args.seconds)
        if args.what in ("fuzz", "all"):
            results["fuzz"] = fuzz(server, args.cases, args.seed)
        results["load_after"] = load_average()
    finally:
        server.stop()
        shutil.rmtree(root.parent, ignore_errors=True)
    text = json.dumps(results, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
