"""Full-size fidelity: GPT-2 small and ResNet-50 with random weights drawn by the reference
implementations, imported with `lbdl import`, against the reference's own outputs.

Needs torch, and transformers for GPT-2 (neither is a dependency of lbdl: install them in the
environment that runs this, `pip install torch transformers`); what is missing is skipped with
a note. The ResNet-50 reference is torchvision's, written out in
tests/fixtures/interop/make.py (torchvision itself is not needed). Prints, per model, the largest
difference relative to the largest logit (the target is 1e-4), and how long the import took.

    python bench/interop.py [--tokens 128] [--images 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TARGET = 1e-4
# `python bench/interop.py` puts bench/ first on the path, where kernels.py would be taken for
# the `kernels` package transformers looks for
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def _reference_module():
    spec = importlib.util.spec_from_file_location(
        "make_interop_fixtures", REPO / "tests" / "fixtures" / "interop" / "make.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compare(name, spec, overrides, family, state_dict, inputs, reference, tmp: Path) -> dict:
    import jax.numpy as jnp
    from safetensors.torch import save_file

    import lbdl_dsl
    from lbdl_dsl.interop import import_weights

    checkpoint = tmp / f"{name}.safetensors"
    save_file(state_dict, str(checkpoint))
    model = lbdl_dsl.compile(REPO / spec, **overrides)
    t0 = time.perf_counter()
    result = import_weights(model, checkpoint, family, output=tmp / f"{name}.lbdl.safetensors")
    seconds = time.perf_counter() - t0
    params, state = model.load(result.path)
    out, _ = model.jit_apply(params, state, *[jnp.asarray(x) for x in inputs])
    got, want = np.asarray(out, np.float64), np.asarray(reference, np.float64)
    error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    return {"model": name, "parameters": model.param_count, "error": error, "import_s": seconds}


def gpt2(tmp: Path, tokens: int) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    ids = torch.randint(0, 50_257, (1, tokens))
    with torch.no_grad():
        logits = model(input_ids=ids).logits.numpy()
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return _compare(
        "gpt2", "specs/gpt2.lbdl", {"T": tokens}, "gpt2", sd, [ids.numpy()], logits, tmp
    )


def resnet50(tmp: Path, images: int) -> dict:
    import torch

    ref = _reference_module()
    torch.manual_seed(0)
    model = ref.ResNet(ref.Bottleneck, [3, 4, 6, 3])
    with torch.no_grad():  # batchnorm off its identity, so that every tensor of it matters
        for name, t in model.state_dict().items():
            if name.endswith(("running_mean", "bn1.bias", "bn2.bias", "bn3.bias")):
                t.copy_(0.1 * torch.randn_like(t))
            elif name.endswith("running_var"):
                t.copy_(0.5 + torch.rand_like(t))
            elif ".bn" in name and name.endswith("weight"):
                t.copy_(1.0 + 0.1 * torch.randn_like(t))
    model.eval()
    x = torch.randn(images, 3, 224, 224)
    with torch.no_grad():
        logits = model(x).numpy()
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    return _compare(
        "resnet50", "specs/resnet50-torchvision.lbdl", {}, "resnet", sd, [x.numpy()], logits, tmp
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=128, help="GPT-2's sequence length")
    p.add_argument("--images", type=int, default=2, help="ResNet-50's batch")
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: needs torch (pip install torch transformers)")
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("gpt2 skipped: needs transformers")
        else:
            rows.append(gpt2(Path(tmp), args.tokens))
        rows.append(resnet50(Path(tmp), args.images))
    ok = True
    for r in rows:
        verdict = "ok" if r["error"] <= TARGET else "TOO FAR"
        ok &= r["error"] <= TARGET
        print(
            f"{r['model']:9s} {r['parameters']:>12,} parameters  max relative difference "
            f"{r['error']:.1e} (target {TARGET:.0e}: {verdict})  import {r['import_s']:.1f} s"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
