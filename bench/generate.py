"""Text generation with a KV cache against transformers' PyTorch ``generate`` with its cache.

GPT-2 small (specs/gpt2.lbdl at its defaults: 124,439,808 parameters), random weights of the
same shapes on both sides, batch 1, a prompt of 128 tokens, 128 new tokens, greedy, float32.
Both sides run in this one invocation, interleaved (the peer in a subprocess of
/work/refvenv's Python, which has torch and transformers; the project's own environment has
neither; it waits for each measurement it is asked for, so that the two sides take turns and
share the machine's load): each warms up once (compilation, allocation), then is timed
``--repeats`` times (the prefill ``--prefills`` times back to back in each turn, as its time varies
from call to call) and the best run kept. Reported per side: the prefill (the prompt's one
forward pass, up to its first new token; the logits of the last position only, as
transformers' ``generate`` asks for with ``logits_to_keep=1`` and lbdl's decoding module
computes) in ms, the steps after it in tokens/s, and the whole in tokens/s; then the ratios.
Both sides use the machine's cores: torch ``--threads`` of them (all by default), XLA:CPU its
own pool of one thread per core.

    python bench/generate.py [--prompt 128] [--new 128] [--repeats 3] [--prefills 8] [--json FILE]

On an accelerator, ``--bandwidth PEAK_GB_S`` also reports the memory-bandwidth use of a decoded
token: the bytes one step must read (every parameter once, in the compute dtype, plus the KV
cache up to that position, `compiler.memory.kv_cache`) over the step's time, over the device's
peak (an H100 SXM's HBM3: 3350 GB/s). ``--spec``, ``--set`` and ``--dtype bfloat16`` choose the
model (the issue's GPU row: a LLaMA-shaped 1B spec in bf16; it has not been run, as no GPU was
at hand when this was written).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "performance-generate.json"  # --record: beside docs/performance.md
# --record run on one core (`taskset -c 0 python bench/generate.py --threads 1 --record`)
RECORD_ONE_CORE = ROOT / "docs" / "performance-generate-one-core.json"
# the GPU row: a device run's figures, this bench's (--no-peer) and bench/decode_profile.py's
RECORD_GPU = ROOT / "docs" / "performance-generate-gpu.json"
HEADING = "## Text generation: lbdl against transformers' PyTorch generate"
PEER_PYTHON = os.environ.get("LBDL_PEER_PYTHON", "/work/refvenv/bin/python")

PEER = r"""
import json, sys, time
import torch, transformers
prompt_len, new, threads = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
ids = torch.randint(0, 50257, (1, prompt_len))
def prefill():  # generate's first call: the cache filled, the last position's logits
    with torch.no_grad():
        return model(ids, use_cache=True, logits_to_keep=1)
def whole():
    with torch.no_grad():
        return model.generate(ids, do_sample=False, max_new_tokens=new, min_new_tokens=new,
                              use_cache=True, pad_token_id=0)
prefill(); out = whole()  # warm-up
assert out.shape[1] == prompt_len + new
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                  "threads": torch.get_num_threads()}), flush=True)
for line in sys.stdin:  # one measurement per line asked for: "prefill" or "whole"
    run = prefill if line.strip() == "prefill" else whole
    t = time.perf_counter(); run(); took = time.perf_counter() - t
    print(json.dumps({"s": took}), flush=True)
"""


class Ours:
    """lbdl's side: the model compiled and warmed up; `measure` times one prefill or one whole
    generation."""

    def __init__(self, args: argparse.Namespace) -> None:
        import jax
        import numpy as np

        import lbdl_dsl
        from lbdl_dsl.backends.jax.decode import Sampling

        self.args = args
        sets = dict(s.split("=", 1) for s in args.set)
        self.model = lbdl_dsl.compile(str(ROOT / args.spec), dtype=args.dtype, **sets)
        self.params, self.state = self.model.init(jax.random.key(0))
        self.decoder = self.model.decoder
        self.prompt = np.random.default_rng(0).integers(
            0, self.decoder.plan.vocab, (1, args.prompt)
        )
        self.greedy = Sampling(greedy=True)
        self.context = self.decoder.context(args.prompt + args.new)
        self.measure("prefill")
        self.measure("whole")  # warm-up: compiles the prompt's shape and the loop's

    def measure(self, what: str) -> float:
        import jax
        import jax.numpy as jnp

        d, args = self.decoder, self.args
        if what == "prefill":
            cache = d.init_cache(1, self.context, self.state)
            jax.block_until_ready(cache)
            ids = jnp.asarray(self.prompt, jnp.int32)
            t = time.perf_counter()
            out = d.run(self.params, cache, ids, 0, jax.random.key(0), self.context, self.greedy)
            jax.block_until_ready(out)
            return time.perf_counter() - t
        t = time.perf_counter()
        gen = d.generate(self.params, self.prompt, args.new, self.greedy, state=self.state)
        assert gen.ids.shape == (1, args.prompt + args.new)
        return time.perf_counter() - t

    def result(self, pre: float, total: float) -> dict:
        import jax

        from lbdl_dsl.compiler import memory

        args = self.args
        result = {
            "prefill_s": pre,
            "total_s": total,
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "threads": os.cpu_count(),  # XLA:CPU's intra-op pool: one thread per core
            "cores": len(os.sched_getaffinity(0)),  # the cores this process may run on
            "compiles": self.decoder.traces,
        }
        if args.bandwidth:
            step = (total - pre) / (args.new - 1)
            itemsize = 2 if args.dtype == "bfloat16" else 4
            weights = self.model.param_count * itemsize
            cache = memory.kv_cache(self.model.checked)
            assert cache is not None
            # the cache read by the average step: positions prompt .. prompt + new, float32
            average = args.prompt + args.new / 2
            kv = int(cache.per_token.as_int() or 0) * average
            read = weights + kv
            result |= {
                "bytes_per_token": read,
                "step_s": step,
                "bandwidth_use": read / step / (args.bandwidth * 1e9),
            }
        return result


class Peer:
    """transformers' side, in /work/refvenv's Python: started and warmed up, then asked for
    one measurement at a time."""

    def __init__(self, args: argparse.Namespace) -> None:
        cmd = [PEER_PYTHON, "-c", PEER, str(args.prompt), str(args.new), str(args.threads)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.about = json.loads(self._line())

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            raise SystemExit(f"the peer failed:\n{self.proc.stderr.read()[-2000:]}")
        return line

    def measure(self, what: str) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self._line())["s"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def rates(r: dict, args: argparse.Namespace) -> dict:
    """Tokens/s of the steps after the prefill, and of the whole generation."""
    steps = r["total_s"] - r["prefill_s"]
    return r | {
        "decode_tokens_per_s": (args.new - 1) / steps,
        "tokens_per_s": args.new / r["total_s"],
    }


def show(side: str, r: dict) -> None:
    print(
        f"{side:13} prefill {r['prefill_s'] * 1e3:8.1f} ms   decode "
        f"{r['decode_tokens_per_s']:7.1f} tokens/s   whole {r['tokens_per_s']:7.1f} tokens/s",
        flush=True,
    )
    if "bandwidth_use" in r:
        print(
            f"{'':13} {r['bytes_per_token'] / 1e6:.1f} MB read per token: "
            f"{r['bandwidth_use']:.0%} of the peak bandwidth",
            flush=True,
        )


def ratios(results: dict) -> dict:
    """lbdl over transformers: the prefill's time (≤ 1 is the target), decode and whole tokens/s
    (≥ 1)."""
    ours, peer = results["lbdl"], results["transformers"]
    return {
        "prefill_time": ours["prefill_s"] / peer["prefill_s"],
        "decode_tokens_per_s": ours["decode_tokens_per_s"] / peer["decode_tokens_per_s"],
        "tokens_per_s": ours["tokens_per_s"] / peer["tokens_per_s"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="specs/gpt2.lbdl")
    p.add_argument("--set", nargs="*", default=[], metavar="K=V")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prefills", type=int, default=8, help="prefills timed per turn")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch's threads")
    p.add_argument("--bandwidth", type=float, metavar="PEAK_GB_S", help="the device's peak")
    p.add_argument("--no-peer", action="store_true", help="time lbdl only (a GPU run)")
    p.add_argument("--json", metavar="FILE")
    p.add_argument(
        "--record",
        action="store_true",
        help=f"save the figures ({RECORD.name}) and write their section of docs/performance.md",
    )
    p.add_argument("--render", action="store_true", help="rewrite the section from saved figures")
    args = p.parse_args()
    if args.render:
        render()
        return
    sides: dict[str, Any] = {"lbdl": Ours(args)}
    if not args.no_peer:
        sides["transformers"] = Peer(args)
    times: dict[str, dict[str, list[float]]] = {n: {"prefill": [], "whole": []} for n in sides}
    for _ in range(args.repeats):  # the sides take turns, each measurement in the same moment
        for what in ("prefill", "whole"):
            for name, side in sides.items():
                # a prefill is short and its time varies from one call to the next on this
                # machine (120 to 250 ms alike for both sides, back to back): each turn times
                # several, one after the other, and the best of all is kept, as for the whole
                for _ in range(args.prefills if what == "prefill" else 1):
                    took = side.measure(what)
                    times[name][what].append(took)
                    print(f"  {name} {what}: {took:.3f} s", file=sys.stderr, flush=True)
    results = {}
    for name, side in sides.items():
        pre, total = min(times[name]["prefill"]), min(times[name]["whole"])
        about = (
            side.result(pre, total)
            if name == "lbdl"
            else side.about
            | {
                "prefill_s": pre,
                "total_s": total,
            }
        )
        results[name] = rates(about, args)
        show(name, results[name])
    if not args.no_peer:
        sides["transformers"].close()
        results["ratios"] = ratios(results)
        r = results["ratios"]
        print(
            f"{'lbdl / peer':13} prefill time {r['prefill_time']:.3f} (target ≤ 1)   decode "
            f"{r['decode_tokens_per_s']:.3f} (≥ 1)   whole {r['tokens_per_s']:.3f} (≥ 1)",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.record:
        shown = [a for a in sys.argv[1:] if a not in ("--json", args.json)]
        one_core = results["lbdl"]["cores"] == 1
        pin = "taskset -c 0 " if one_core else ""
        results["command"] = pin + "python bench/generate.py " + " ".join(shown)
        results["load"] = os.getloadavg()
        results["prefills"] = args.prefills
        (RECORD_ONE_CORE if one_core else RECORD).write_text(
            json.dumps(results, indent=1) + "\n", encoding="utf-8"
        )
        render()


def render() -> None:
    """docs/performance.md's section from the saved figures."""
    main_record = json.loads(RECORD.read_text(encoding="utf-8"))
    write_section(ROOT / "docs" / "performance.md", main_record, _saved(RECORD_ONE_CORE))


WHY = [
    "What the decoding does, and why (each found in XLA:CPU's optimised program of the step, "
    "then timed): a decoded token must read every weight once, about 500 MB for GPT-2 small. "
    "(1) A ×N group's weights are stacked, one array per parameter, and XLA:CPU copies a "
    "layer's slice out of the stack before using it, so `Decoder.split` hands the decoding "
    "module each stacked weight as a list of its layers, split once per generation, and the "
    "layers run one after the other (`each_layer`): a step of 48 ms against 102 ms scanned. "
    "(2) The cache of a ×N group is a list of its layers' arrays too, each written in place "
    "(`dynamic_update_slice` on a donated buffer): restacking the layers' new caches copied "
    "every layer's cache at every step (19 MB a token, plus a copy of the stack before it was "
    "sliced). (3) GPT-2's output layer is tied to the token embedding, ``x @ table.T``; for one "
    "row XLA:CPU wrote the transposed 154 MB table out before the product, every step; the "
    "decoding module reads the table by rows (`dense_rows`: table · xᵀ). (4) The tokens after "
    "the first come from one compiled `lax.fori_loop` (`Decoder.generate`): no dispatch, no "
    "copy to the host, no new buffer per token; `Decoder.stream`, which `lbdl generate` uses "
    "to print each token as it comes, still makes one call per token. (5) The boxes after the "
    "last one that mixes positions (the final layernorm and the output layer) get the last "
    "position alone in a decoding module (`decoding.last_only_from`): the prefill computes one "
    "row of logits, not 128 × 50,257 of them, as transformers' `generate` does "
    "(`logits_to_keep=1`, which the peer's prefill here is given too). (6) A prompt's first "
    "chunk goes into a fresh cache, so its position is the int 0, known when compiling "
    "(`Decoder.run`): its attention reads the prompt's keys alone, not the cache's empty slots "
    "too (two thirds of GPT-2 small's attention for 128 tokens in a cache of 256), and its "
    "keys are written as one block. (7) `Decoder.split`, which copies each layer's weights out "
    "of their stack anyway, lays the copies out for the products (`decode_weights`): each "
    "weight stored (Dout, Din) and multiplied as w · xᵀ, which XLA:CPU's products of these "
    "sizes ran about 10 % faster (768 → 3,072 outputs for 128 rows: 245 → 266 GFLOP/s on an "
    "idle machine), and an attention's query, key and value weights side by side, one product "
    "of 2,304 outputs in place of three of 768; with (6), the prefill went from 1.09× the "
    "peer's time to 0.98×, and decoding from 1.05× its tokens/s to 1.2×. Greedy tokens are "
    "those of one call per token (tests/backends/test_decode_loop.py), of the weights as "
    "`init` makes them (tests/backends/test_decode_weights.py) and of transformers "
    "(tests/interop/test_generate_hf.py).",
    "",
    "What limits it. The prefill is compute-bound: about 22 GFLOP of matrix products for 128 "
    "tokens, four fifths of its time in XLA:CPU's profile. Its products run at about 250 "
    "GFLOP/s where PyTorch's reach about 300 on the same sizes, alone and idle; XLA:CPU's "
    "options for XNNPACK and oneDNN (`--xla_cpu_experimental_xnn_fusion_type`, "
    "`--xla_cpu_experimental_onednn_fusion_type`, `--xla_cpu_use_onednn`) were no faster. The "
    "prefill is even with the peer's because the rest of it is shorter than PyTorch's, so the "
    "margin is small. In the compiled loop, XLA:CPU still "
    "writes each layer's cached keys out transposed for the query's product, and copies each "
    "layer's ring of keys and values in the loop's body (both found in its optimised "
    "program; the copies' cause is not found: a loop of the same shapes alone has none).",
]


BEFORE = (
    "Before the changes (2), (3), (4) and (5) below, on an idler machine (a load average of "
    "1.3), this benchmark measured a prefill of 196 ms against 162 ms (the peer computing "
    "every position's logits then) and 20.6 decoded tokens/s against 32.7: behind the peer. "
    "Before (6) and (7), a prefill of 152 ms against 122 and 29.3 tokens/s against 29.0."
)


def verdict(ratio: dict, load: list[float]) -> str:
    """Which of the issue's targets this run meets, from the ratios, and how loaded it was."""
    cores = os.cpu_count() or 1
    busy = ""
    if load and load[0] > 2 * cores:
        busy = (
            f" Under this load ({load[0]:.1f} runnable processes for {cores} cores) torch's "
            "threads lose the most; the run on one core below, each side one thread, where the "
            "load moves both sides alike, is the fairer comparison."
        )
    prefill = f"the prefill takes {ratio['prefill_time']:.2f}× the peer's time (target ≤ 1)"
    decode = f"decoding makes {ratio['decode_tokens_per_s']:.2f}× the peer's tokens/s (target ≥ 1)"
    met = [t for t, ok in ((prefill, ratio["prefill_time"] <= 1),) if ok]
    met += [t for t, ok in ((decode, ratio["decode_tokens_per_s"] >= 1),) if ok]
    missed = [t for t in (prefill, decode) if t not in met]
    parts = []
    if met:
        parts.append("**Met in this run**: " + "; ".join(met) + ".")
    if missed:
        parts.append("**Not met in this run**: " + "; ".join(missed) + ".")
    return " ".join(parts) + busy


def one_core_part(record: dict) -> list[str]:
    """The run pinned to one core, both sides one thread: no thread waits for another, so the
    machine's load moves both sides alike."""
    ours, peer = record["lbdl"], record["transformers"]
    r = ratios(record)
    load = ", ".join(f"{x:.1f}" for x in record.get("load", []))
    return [
        "",
        f"The same benchmark on one core (`{record['command']}`: "
        f"torch with {peer['threads']} thread, XLA:CPU's pool on the same core; a load average "
        f"of {load or 'not recorded'}): a prefill of {ours['prefill_s'] * 1e3:.0f} ms against "
        f"{peer['prefill_s'] * 1e3:.0f} ms ({r['prefill_time']:.3g}), "
        f"{ours['decode_tokens_per_s']:.3g} decoded tokens/s against "
        f"{peer['decode_tokens_per_s']:.3g} ({r['decode_tokens_per_s']:.3g}), "
        f"{ours['tokens_per_s']:.3g} tokens/s in all against {peer['tokens_per_s']:.3g} "
        f"({r['tokens_per_s']:.3g}). {verdict(r, [])}",
    ]


def section(record: dict, one_core: dict | None = None) -> list[str]:
    """docs/performance.md's section on generation, from `--record`'s figures."""
    ours, peer = record["lbdl"], record["transformers"]
    rows = [
        ("prefill, 128 tokens (ms)", ours["prefill_s"] * 1e3, peer["prefill_s"] * 1e3, "≤ 1"),
        ("decode (tokens/s)", ours["decode_tokens_per_s"], peer["decode_tokens_per_s"], "≥ 1"),
        ("whole generation (tokens/s)", ours["tokens_per_s"], peer["tokens_per_s"], "≥ 1"),
    ]
    table = ["| metric | lbdl | transformers | ratio | target |", "|---|---:|---:|---:|---|"]
    for name, a, b, target in rows:
        table.append(f"| {name} | {a:.4g} | {b:.4g} | {a / b:.3g} | {target} |")
    load = ", ".join(f"{x:.1f}" for x in record.get("load", []))
    return [
        HEADING,
        "",
        "Written by `bench/generate.py --record` (edit that, not this). GPT-2 small "
        "(specs/gpt2.lbdl, 124,439,808 parameters, random weights of the same shapes on both "
        "sides), batch 1, a 128-token prompt and 128 new tokens, greedy, float32, on this "
        "CPU; the best of the runs of each side, the two sides taking turns in one invocation "
        f"(the peer: torch {peer['torch']} with {peer['threads']} threads, transformers "
        f"{peer['transformers']}, its own KV cache; lbdl: XLA:CPU's pool of "
        f"{ours.get('threads', 'one per core')} threads). The prefill is the prompt's one "
        "forward pass up to the first new token's logits, on both sides, timed "
        f"{record.get('prefills', 1)} times back to back in each turn, as one call's time moves "
        "from call to call. The machine is shared "
        f"(2 cores; a load average of {load or 'not recorded'} over 1, 5 and 15 minutes when "
        "the figures were saved, other work paused while they were measured): each figure moves "
        "from run to run, and the load moves the two sides differently (torch's threads wait "
        "for each other when other processes hold the cores). "
        f"{verdict(ratios(record), record.get('load', []))} {BEFORE}",
        "",
        *table,
        "",
        "<!-- doctest: skip: a benchmark of minutes; the table above is its output -->",
        "```sh",
        record["command"],
        "```",
        *(one_core_part(one_core) if one_core else []),
        "",
        *WHY,
        "",
        *gpu_part(_saved(RECORD_GPU)),
    ]


def _saved(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def gpu_part(record: dict | None) -> list[str]:
    """The GPU row: a LLaMA-shaped 1B in bf16, its decoded tokens' use of the memory bandwidth
    (saved by a `--record --no-peer` run on the device, with `bench/decode_profile.py`'s
    kernels by kind)."""
    head = (
        "On a GPU, a LLaMA-shaped 1B model in bf16 (specs/llama2-7b.lbdl with N=22, D=2048, "
        "H=32, F=5632: 1,261,529,088 parameters) gives the memory-bandwidth use of a decoded "
        "token: the bytes a step reads (every parameter once, and the KV cache up to its "
        "position) over the step's time, over the device's peak; the target is ≥ 60 %."
    )
    if record is None:
        return [head + " **Not run**: no GPU was at hand."]
    ours, profile, before = record["lbdl"], record["profile"], record["before_cast"]
    kinds = ", ".join(
        f"{name} {ms:.3f} ms ({n:.0f} kernels)" for name, ms, n in profile["kinds"][:4]
    )
    return [
        head,
        "",
        "<!-- doctest: skip: needs a GPU; the figures are docs/performance-generate-gpu.json -->",
        "```sh",
        record["command"],
        "```",
        "",
        f"On an {record['device']} (jax {ours['jax']}, a peak of {record['peak_gb_s']} GB/s): "
        f"{ours['decode_tokens_per_s']:.0f} decoded tokens/s, "
        f"{ours['bytes_per_token'] / 1e6:.0f} MB read per token, "
        f"**{ours['bandwidth_use']:.0%} of the peak bandwidth: the 60 % target is not met**. "
        f"The prefill of 128 tokens took {ours['prefill_s'] * 1e3:.1f} ms. Before "
        f"`Decoder.split` cast the weights to bf16 once, it was "
        f"{before['decode_tokens_per_s']:.0f} tokens/s ({before['bandwidth_use']:.0%}): "
        f"`{profile['command']}` found {profile['before_cast']['wrapped_convert_ms_per_token']:.1f}"
        f" of each token's {profile['before_cast']['ms_per_token']:.1f} ms in "
        f"{profile['before_cast']['wrapped_convert_per_token']:.0f} conversions of float32 "
        "weights, as the module casts every parameter to its compute type on entry. Now the "
        f"device's kernels take {profile['ms_per_token']:.2f} ms per token, "
        f"{profile['kernels_per_token']} kernels: {kinds}. The products read the weights at "
        "about two thirds of the peak; the rest is a few hundred small kernels a token "
        "(normalisations, the softmax, the cache's writes, the rotary positions), each "
        "launched apart inside XLA's loop. Reaching 60 % means a step of "
        f"{ours['bytes_per_token'] / (0.6 * record['peak_gb_s'] * 1e9) * 1e3:.2f} ms, the "
        "products' time alone: a fused decoding kernel per layer, not done.",
    ]


def write_section(doc: Path, record: dict, one_core: dict | None = None) -> None:
    """Replace (or add at the end) the section in ``doc``."""
    text = doc.read_text(encoding="utf-8")
    lines = "\n".join(section(record, one_core))
    if HEADING in text:
        start = text.index(HEADING)
        rest = text.find("\n## ", start + len(HEADING))
        text = text[:start] + lines + ("\n" + text[rest:] if rest != -1 else "\n")
    else:
        text = text.rstrip("\n") + "\n\n" + lines + "\n"
    doc.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
