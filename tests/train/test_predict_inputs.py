"""`lbdl predict`'s inputs as a user gives them: images of other depths and modes, token ids
outside the vocabulary, arrays that hold no sample, NaN or complex values, a folder, a file that
is not an archive, a labels file with a hole. Each is read right or refused in one message with
exit 1; none reaches the model to come back as a NaN or another token's answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.cli import main
from lbdl_dsl.interop import samples

Image = pytest.importorskip("PIL.Image")

TOKENS = """\
model tokens(V=5):
  input X: 4 int<V>
  embed d=2          4×2
  reshape            8
  fc                 3
  output Y
"""

LINEAR = """\
model linear:
  input X: 3
  fc                 3
  output Y
"""

# an 8×6 picture whose values are exact in 8 bits (multiples of 17) and so in 16 (of 257 × 17)
PICTURE = (np.arange(48).reshape(8, 6) % 16 * 17).astype(np.uint8)


def _fails(capsys, argv: list[str], *wanted: str) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 2 and err.startswith("error: "), err  # message, hint
    for w in wanted:
        assert w in err, err


@pytest.mark.parametrize("shape", [(1, 4, 3), (3, 4, 3), (4, 3)])
def test_a_16_bit_image_is_scaled_from_its_own_range(tmp_path: Path, shape) -> None:
    # Pillow's convert("L") clips a 16-bit image at 255: every pixel above 255/65535 white
    eight, sixteen = tmp_path / "eight.png", tmp_path / "sixteen.png"
    Image.fromarray(PICTURE).save(eight)
    Image.fromarray(PICTURE.astype(np.uint16) * 257).save(sixteen)
    with Image.open(sixteen) as opened:
        assert opened.mode.startswith("I;16")
    inputs = {"X": (shape, "float32")}
    want = samples.read([str(eight)], inputs).arrays["X"]
    got = samples.read([str(sixteen)], inputs).arrays["X"]
    assert got.shape == (1, *shape)
    np.testing.assert_allclose(got, want, atol=1 / 255)  # the 8-bit resize rounds to 8 bits
    assert 0.2 < got.mean() < 0.8  # not clipped to white


def test_an_image_of_floats_is_refused_not_clipped(tmp_path: Path) -> None:
    path = tmp_path / "f.tif"
    Image.fromarray(PICTURE.astype(np.float32) / 255).save(path)
    with pytest.raises(lbdl_dsl.LbdlError, match="floating-point values.*range is not known"):
        samples.read([str(path)], {"X": ((1, 4, 3), "float32")})


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, Path]:
    import jax

    spec = tmp_path / "tokens.lbdl"
    spec.write_text(TOKENS, "utf-8")
    model = lbdl_dsl.compile(spec)
    params_path = tmp_path / "tokens.safetensors"
    model.save(params_path, *model.init(jax.random.key(0)))
    return spec, params_path


@pytest.mark.parametrize(
    ("ids", "message"),
    [([0, 1, 2, 5], "holds tokens from 0 to 5; the input X takes 0..4"), ([-1, 0, 1, 2], "-1")],
)
def test_token_ids_outside_the_vocabulary_are_refused(tokens, tmp_path, capsys, ids, message):
    spec, params = tokens
    x = tmp_path / "x.npz"
    np.savez(x, X=np.array(ids))
    _fails(capsys, ["predict", str(spec), "--params", str(params), str(x)], message)
    np.savez(x, X=np.array([0, 1, 2, 4]))  # the last token of the vocabulary is one
    assert main(["predict", str(spec), "--params", str(params), str(x)]) == 0


@pytest.fixture
def linear(tmp_path: Path) -> list[str]:
    import jax

    spec = tmp_path / "linear.lbdl"
    spec.write_text(LINEAR, "utf-8")
    model = lbdl_dsl.compile(spec)
    params = tmp_path / "linear.safetensors"
    model.save(params, *model.init(jax.random.key(0)))
    return ["predict", str(spec), "--params", str(params)]


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((0, 3), np.float32), "`X` holds no samples (0×3)"),
        (np.array([1.0, np.nan, 0.0]), "`X` holds NaN or infinite values"),
        (np.array([1.0, np.inf, 0.0]), "`X` holds NaN or infinite values"),
        (np.ones(3, np.complex64), "`X` holds complex64 values; the input X takes real numbers"),
    ],
)
def test_arrays_the_model_cannot_answer_are_refused(linear, tmp_path, capsys, array, message):
    x = tmp_path / "x.npz"
    np.savez(x, X=array)
    _fails(capsys, [*linear, str(x)], f"{x}: {message}")


def test_a_folder_and_a_file_that_is_not_an_archive(linear, tmp_path: Path, capsys) -> None:
    _fails(capsys, [*linear, str(tmp_path)], f"{tmp_path}: a folder, not a file")
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a zip")
    _fails(capsys, [*linear, str(bad)], "not a readable .npz file (File is not a zip file)")


def test_labels_with_an_empty_line_inside_are_refused(linear, tmp_path: Path, capsys) -> None:
    x = tmp_path / "x.npz"
    np.savez(x, X=np.array([0.0, 1.0, 0.0], np.float32))
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\n\ndog\nbird\n", "utf-8")  # 3 names once the hole is dropped
    _fails(capsys, [*linear, str(x), "--labels", str(labels)], f"{labels}:2: an empty line")
    labels.write_text("cat\ndog\nbird\n\n\n", "utf-8")  # blank lines at the end are fine
    assert main([*linear, str(x), "--labels", str(labels)]) == 0


def test_an_image_too_large_to_read_is_refused(tmp_path: Path, capsys) -> None:
    # a PNG header claiming 30,000×30,000 pixels: Pillow's DecompressionBombError was exit 3
    import struct
    import zlib

    import jax

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 30_000, 30_000, 8, 0, 0, 0, 0)
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b""))
    spec = tmp_path / "grey.lbdl"
    spec.write_text("model grey:\n  input X: 1×4×4\n  reshape 16\n  fc 2\n  output Y\n", "utf-8")
    model = lbdl_dsl.compile(spec)
    params = tmp_path / "grey.safetensors"
    model.save(params, *model.init(jax.random.key(0)))
    _fails(capsys, ["predict", str(spec), "--params", str(params), str(bomb)], "too large")


def test_labels_with_a_byte_order_mark_and_top_k_below_one(linear, tmp_path: Path, capsys) -> None:
    x = tmp_path / "x.npz"
    np.savez(x, X=np.array([0.0, 1.0, 0.0], np.float32))
    labels = tmp_path / "labels.txt"
    labels.write_bytes("cat\r\ndog\r\nbird\r\n".encode("utf-8-sig"))  # as Notepad saves it
    assert main([*linear, str(x), "--labels", str(labels), "--top-k", "3"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert sorted(names) == ["bird", "cat", "dog"]  # not "\ufeffcat"
    with pytest.raises(SystemExit) as exit_:
        main([*linear, str(x), "--top-k", "0"])
    assert exit_.value.code == 1
    assert "argument --top-k: a whole number ≥ 1, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("shape", [(1, 8, 6), (3, 8, 6)])
def test_a_transparent_drawing_is_read_over_white(tmp_path: Path, shape) -> None:
    # black strokes on transparent black, as a canvas saves a drawing: Pillow's convert drops
    # the alpha, and the drawing came out all black
    rgba = np.zeros((8, 6, 4), np.uint8)
    rgba[2:6, 3, 3] = 255  # a stroke: opaque black
    path = tmp_path / "drawing.png"
    Image.fromarray(rgba).save(path)
    got = samples.read([str(path)], {"X": (shape, "float32")}).arrays["X"][0]
    want = np.ones((8, 6), np.float32)
    want[2:6, 3] = 0.0
    np.testing.assert_allclose(got, np.broadcast_to(want, shape))


def test_a_photo_is_turned_upright_by_its_exif_orientation(tmp_path: Path) -> None:
    # stored sideways with Orientation 6 (turn 90° clockwise to view), as a phone saves it
    upright = np.zeros((8, 6), np.uint8)
    upright[0, :] = 255  # a white top row
    stored = np.rot90(upright, 1)  # what the camera wrote: the top row on the left
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "photo.png"
    Image.fromarray(np.ascontiguousarray(stored)).save(path, exif=exif)
    got = samples.read([str(path)], {"X": ((1, 8, 6), "float32")}).arrays["X"][0, 0]
    np.testing.assert_allclose(got, upright / 255.0)


def test_model_predict_checks_token_ids_as_apply_does(tokens) -> None:
    # predict runs jit_apply, where the ids are traced and were not checked: NaN probabilities
    spec, params_path = tokens
    model = lbdl_dsl.compile(spec)
    params, state = model.load(params_path)
    with pytest.raises(lbdl_dsl.LbdlError, match="token ids in \\[0, 5\\), got ids from 0 to 7"):
        model.predict(params, state, np.array([[0, 1, 2, 7]]))
    assert np.isfinite(np.asarray(model.predict(params, state, np.array([[0, 1, 2, 4]])))).all()
