"""Where a decoded token's time goes on an accelerator: the device's kernels of one generation,
summed by kind and divided by the tokens made.

``python bench/decode_profile.py [--spec S] [--set K=V ...] [--dtype bfloat16] [--new 128]``
generates ``--new`` tokens after a 128-token prompt twice (compiling, then timed), a third time
under JAX's profiler, and prints the kernels' time per token by kind (a kernel's name without
its number), with how many run per token. It found that a LLaMA-shaped 1B in bf16 spent half of
each token converting its float32 weights (`Decoder.split` now casts them once), and what the
rest is (docs/performance.md, the generation section's GPU paragraph).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import lbdl_dsl  # noqa: E402
from lbdl_dsl.backends.jax.decode import Sampling  # noqa: E402

DEFAULT_SETS = ["N=22", "D=2048", "H=32", "F=5632"]  # the LLaMA-shaped 1B


def kernels(trace: Path) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Microseconds and calls of the device's kernels in a profile, by kind."""
    f = sorted(glob.glob(str(trace / "**" / "*.trace.json.gz"), recursive=True))[-1]
    with gzip.open(f) as stream:
        events = json.load(stream)["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    time_of: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and "/device:" in names.get(e["pid"], ""):
            kind = re.sub(r"[._]?\d+$", "", e["name"])[:90]
            time_of[kind] += e["dur"]
            calls[kind] += 1
    return time_of, calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="specs/llama2-7b.lbdl")
    p.add_argument("--set", nargs="*", default=DEFAULT_SETS, metavar="K=V")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--top", type=int, default=12, help="kinds shown")
    args = p.parse_args()
    sets = dict(s.split("=", 1) for s in args.set)
    model = lbdl_dsl.compile(str(ROOT / args.spec), dtype=args.dtype, **sets)
    params, state = model.init(jax.random.key(0))
    decoder = model.decoder
    prompt = np.random.default_rng(0).integers(0, decoder.plan.vocab, (1, args.prompt))
    greedy = Sampling(greedy=True)

    def generate() -> float:
        t = time.perf_counter()
        decoder.generate(params, prompt, args.new, greedy, state=state)
        return time.perf_counter() - t

    generate()
    print(f"one generation: {generate() * 1e3:.1f} ms for {args.new} tokens")
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        generate()
        jax.profiler.stop_trace()
        time_of, calls = kernels(Path(folder))
    total = sum(time_of.values())
    if not total:
        print("no device kernels in the profile: on a CPU, XLA's work runs as host threads")
        return
    print(
        f"the device's kernels: {total / 1e3 / args.new:.3f} ms per token, "
        f"{sum(calls.values()) / args.new:.0f} kernels per token"
    )
    for kind, us in time_of.most_common(args.top):
        print(f"{us / 1e3 / args.new:8.4f} ms  {calls[kind] / args.new:6.1f} per token  {kind}")


if __name__ == "__main__":
    main()
