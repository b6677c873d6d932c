"""The book's figures, each drawn by one command, with its review beside the book.

*The Little Book of Deep Learning* draws nine network figures in chapter 5 (5.1–5.9) and the
U-Net-style skips of Fig. 4.10. Each entry here names the spec and the flags that draw it (the
command a reader types), and the review of the picture against the book's figure box by box
(`/work/shared/book/FIGURES.md` records them): what matches, what differs and why. The gallery
tool draws every entry into ``docs/gallery/book/`` and writes the reviews into
``docs/gallery.md``; the tests keep a golden DOT of each, so a change to any of these pictures
shows in review.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.instance import Checked


@dataclass(frozen=True)
class BookFigure:
    """One figure of the book: how to draw it, and how the drawing compares with it."""

    figure: str  # "5.3"
    title: str
    spec: str  # relative to the repository
    review: str  # Markdown: what matches, what differs and why
    block: str | None = None
    expand: str | None = None
    pending: str = ""  # what the figure still waits for, if anything

    @property
    def slug(self) -> str:
        return "fig" + self.figure.replace(".", "-")

    @property
    def command(self) -> str:
        """The command that draws it, as a reader types it from the repository's root."""
        flags = [f"--block {self.block}"] if self.block else []
        flags += [f"--expand {self.expand}"] if self.expand else []
        return " ".join(["lbdl-compile", self.spec, *flags, "--emit png"])

    def compile(self, repo: Path, overrides: dict[str, Any] | None = None) -> Checked:
        """The compiled spec (or block) the figure draws."""
        if self.block:
            from lbdl_dsl.compiler.blockdef import compile_block

            return compile_block(repo / self.spec, self.block, overrides)
        return compile_spec(repo / self.spec, overrides=overrides)


FIGURES: tuple[BookFigure, ...] = (
    BookFigure(
        "5.1",
        "Multi-layer perceptron",
        "specs/mlp.lbdl",
        """\
Matches box by box: X (50), fc 25, relu, fc 10, relu, fc 2, Y. The output widths are written at
the far right, the only place the book writes them, and the two fc boxes are dark (parameters),
the relu boxes light. Nothing differs.""",
    ),
    BookFigure(
        "5.2",
        "LeNet-like network for 28×28 digits",
        "specs/lenet.lbdl",
        """\
Matches box by box: X 1×28×28; conv-2d k=5 to 32×24×24; maxpool k=3 to 32×8×8; relu; conv-2d
k=5 to 64×4×4; maxpool k=2 to 64×2×2; relu; reshape to 256; fc 200; relu; fc 10; Ŷ. Only the
hyper-parameters the book writes appear (no stride, no padding: they are defaults). Nothing
differs.""",
    ),
    BookFigure(
        "5.3",
        "Residual block (resblock)",
        "specs/blocks/resnet.lbdl",
        """\
The block drawn on its own, in its own symbols: C×H×W in; conv-2d k=1 to C/4×H×W; batchnorm;
relu; conv-2d k=3 p=1 (C/4×H×W); batchnorm; relu; conv-2d k=1 back to C×H×W; batchnorm; the
bypass from the input into the `+`; relu. Matches the book's boxes and order.
Differs: the middle convolution's C/4×H×W is written although it does not change the shape,
because the right column is the only place a convolution's output width appears (the book
leaves it out there); and the block's convention, convolutions without bias (they feed a
batchnorm), is said once under the figure, where the book says nothing (its text gives the
published count, which needs it).""",
        block="resblock",
    ),
    BookFigure(
        "5.4",
        "Downscaling residual block (dresblock)",
        "specs/blocks/resnet.lbdl",
        """\
Main path as the book: conv-2d k=1 s=S to C/S×H/S×W/S; batchnorm; relu; conv-2d k=3 p=1;
batchnorm; relu; conv-2d k=1 to 4C/S×H/S×W/S; batchnorm; then the shortcut beside it, conv-2d
k=1 s=S to 4C/S×H/S×W/S and batchnorm, into the `+`; relu. S is the block's parameter and has no
value here, so the shapes past the first strided convolution are the block's own annotations
(the checker needs a known stride); the note under the figure says so, and `--set S=2 H=56 W=56`
draws the checked figure. Differs as Fig. 5.3 does (the middle convolution's width, the bias
convention said once); the shortcut runs beside the main path, on its left.""",
        block="dresblock",
    ),
    BookFigure(
        "5.5",
        "ResNet-50",
        "specs/resnet50.lbdl",
        """\
Matches box by box: X 3×224×224; conv-2d k=7 s=2 p=3 to 64×112×112; batchnorm; relu; maxpool
k=3 s=2 p=1 to 64×56×56 (not in the book's text, in He et al.'s network: FIGURES.md); dresblock
S=1 to 256×56×56; resblock ×2; dresblock S=2 to 512×28×28; resblock ×3; dresblock S=2 to
1024×14×14; resblock ×5; dresblock S=2 to 2048×7×7; resblock ×2; avgpool k=7 to 2048×1×1;
reshape 2048; fc 1000; Ŷ. Block calls are tall boxes; each ×N is a dashed frame with its factor
at the corner, apart from the shapes.
Differs: `bias=False`, written on every convolution of the spec, is said once under the figure
instead of on each box (the book writes none).""",
    ),
    BookFigure(
        "5.6",
        "The three transformer blocks",
        "specs/transformer_blocks.lbdl",
        """\
Each block opened into the boxes its registry entry declares, as the book's Fig. 5.6 draws them.
Matches: `ffw` is layernorm, fc to 4D (T×2048), gelu, fc back to D (T×512), dropout, and the `+`
with the block's input; `self-att` is layernorm, three arrows Q, K and V from it into mha, `+`;
`cross-att` is layernorm on X into mha's Q, Z coming in from the side into its K and V, `+` with
X. Each residual splits at a dot at the top of its frame and its bypass runs down the left into
the `+`, except cross-attention's, which runs down the right: Z comes in from the left and
crosses nothing. The frames' titles, at their top right, carry what the spec wrote (self-att h=8
causal=true, cross-att h=8), written once, not again on the boxes inside.
Differs: the book stacks the feed-forward block on top and the two attention blocks side by
side under it, three separate pictures; here they are drawn in the order the spec chains them
(self-att, cross-att, ffw), one under the other. mha is tall, as the book draws a box with an
inner structure; its projections are inside it (its parameters wq, wk, wv, wo).""",
        expand="all",
    ),
    BookFigure(
        "5.7",
        "The original encoder-decoder Transformer",
        "specs/transformer.lbdl",
        """\
Matches: the encoder (X, embed, pos-enc, then self-att and ffw in a frame ×6) beside the decoder
(Y, embed, pos-enc, then self-att causal=True, cross-att reading Z from the encoder, ffw, in a
frame ×6; fc to the vocabulary), Z's arrow labelled where it enters the decoder's frame. The
spec's `tlayer` and `declayer` are opened into the book's boxes (the block's name shows on
hover), and the token inputs say what they hold (T int<37000>).
Differs: h=8 on every attention box and hidden=2048 on ffw (the book leaves the sizes to its
text); the embedding of the decoder and the last fc share the encoder's embedding (`tie=`), as
Vaswani et al. do, which the figure does not show.""",
        expand="1",
    ),
    BookFigure(
        "5.8",
        "GPT",
        "specs/gpt.lbdl",
        """\
Matches: X (tokens), embed, pos-enc, then self-att causal=True and ffw in a frame ×12, fc to the
vocabulary, P. The spec's `tlayer` is opened into the book's two boxes.
Differs: h=12 on self-att and hidden=3072 on ffw are written (GPT-2 small's sizes; the book
gives none in the figure).""",
        expand="1",
    ),
    BookFigure(
        "5.9",
        "Vision Transformer",
        "specs/vit.lbdl",
        """\
Matches: X 3×224×224; patches P=16 to 196×768 (M×3P²); fc W^E to 196×768; the class token E0 in
front, 197×768; positions added; self-att and ffw in a frame ×12; take i=0 keeps Z0 (768); fc,
gelu, fc, gelu, fc to the 1000 classes. Every fc writes its width, those that keep it too.
Differs: the positions are a learned `pos-embed` (ViT's) where the book's figure says pos-enc;
h=12 and hidden=3072 are written on the attention and feed-forward boxes.""",
        expand="1",
    ),
    BookFigure(
        "4.10",
        "Skip connections across scales (U-Net)",
        "specs/unet.lbdl",
        """\
Drawn as a U, as Ronneberger et al.'s Fig. 1: the way down (double convolutions and max-pools,
64×568×568 to 1024×28×28) on the left, the way back up (up-convolutions, concatenations, double
convolutions) on the right, rising to Ŷ 2×388×388. Each skip is a horizontal arrow labelled with
its tensor (s1 … s4) from the map it copies to the concatenation of the same scale, through the
crop that cuts it to size ("copy and crop"). The book's Fig. 4.10 shows the principle (early,
high-resolution maps carried to the later layers of the same scale and concatenated); this is
the network it cites, box by box as the paper writes it.
Differs: the `double` blocks are tall boxes (`--expand double` opens them); the book draws no
crop (its figure is schematic).""",
    ),
)


@dataclass(frozen=True)
class Opened:
    """A spec of specs/ drawn again with some of its boxes open, under its figure, reviewed:
    the boxes whose inside the book does not draw (a mixture of experts, issue 20)."""

    spec: str  # the spec's name, as the gallery lists it
    expand: str
    review: str

    @property
    def slug(self) -> str:
        return f"{self.spec}-{self.expand.replace(',', '-')}"

    @property
    def command(self) -> str:
        return f"lbdl-compile specs/{self.spec}.lbdl --expand {self.expand} --emit png"


OPENED: tuple[Opened, ...] = (
    Opened(
        "mixtral-8x7b",
        "moe",
        """\
The mixture of experts opened as its papers draw it (Shazeer et al. 2017, Fig. 1; Fedus et al.
2021, Fig. 2; Jiang et al. 2024, Fig. 1): the tokens split at a dot into the router, which stays
in the column, and the experts to its right on the router's row: expert 1 drawn as its SwiGLU
body (two fc, silu, their product, fc back), a "⋯" for experts 2 to 7, and expert 8. The
router's gates go straight down into Σ (`top-2 of 8`), and each expert's output comes into Σ at
its own point, converging through the room above it. The residual's bypass runs down the left
of the whole mixture. The frame writes experts=8 k=2 hidden=14336, as the shut box does, so the
boxes inside leave out their widths; the figure is 872 px wide (2,181 px before).
Differs: experts 2 to 7 are one "⋯" (two outlines more would take the figure past 900 px).""",
    ),
    Opened(
        "densenet121",
        "all",
        """\
Every block opened. Each dense layer (batchnorm, relu, conv-2d k=1, batchnorm, relu, conv-2d k=3
p=1, concat) is one column, and its input splits at a dot at the top of its ×N frame and goes
round the left into the concatenation's first point, as a residual's bypass does: `concat(x)`
reads the layer's input first, on the left. The transitions (batchnorm, relu, conv-2d k=1,
avgpool k=2) follow in the same column, from X down to Ŷ without a step sideways (it was a
staircase 200 pt wide, with each skip drawn down its frame's right border).""",
    ),
    Opened(
        "llama2-7b",
        "all",
        """\
Both blocks opened. self-att: rmsnorm, then Q, K and V from it into mha, `+`. ffw (SwiGLU):
rmsnorm, then the gate fc, silu and their product in the column, the up fc beside it on the
right coming into the product's second point, fc back to 4096, dropout, `+`. Each bypass runs
down the left of its block (the SwiGLU's used to cut across it, the column stepping aside to
the gate fc).""",
    ),
)
