"""Files on disk that are not what they seem, and every exit a clear one (issue 45, items 1, 6
to 11).

Outputs never replace a special file; weight and data files are checked before they are
trusted (declared sizes, dtypes, finite values); numbers past what the run can take are refused
with the flag named; ``params.safetensors`` is the same bytes for the same arrays; the import
writer follows the rules of the other outputs. The command-line cases run ``lbdl`` as a user
would, in a subprocess; a FIFO stands for every special file (never a real device here).
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl import ArgumentError, LbdlError
from lbdl_dsl.backends.jax import weights
from lbdl_dsl.output import write_atomic

REPO = Path(__file__).resolve().parents[1]
TINY = "model tiny(D=8):\n  input X: 4\n  fc D\n  relu\n  fc 2\n  output Y\n"


def lbdl(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "lbdl_dsl", *argv],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert "internal error" not in done.stderr, done.stderr
    return done


def in_process(capsys, *argv: str) -> tuple[int, str]:
    """``lbdl ARGV`` in this process: (exit code, stderr)."""
    from lbdl_dsl.cli import main

    try:
        rc = main(list(argv))
    except SystemExit as exit_:
        rc = int(exit_.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err, err
    return rc, err


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.lbdl"
    path.write_text(TINY, "utf-8")
    return path


# -- item 1: special files at an output's path ---------------------------------------------------


def test_a_fifo_without_a_reader_is_refused_not_replaced(tmp_path: Path) -> None:
    from lbdl_dsl.output import atomic_file

    fifo = tmp_path / "out.svg"
    os.mkfifo(fifo)
    with pytest.raises(LbdlError, match="a FIFO that no program is reading"):
        write_atomic(fifo, b"data")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with (
        pytest.raises(LbdlError, match="a FIFO that no program is reading"),
        atomic_file(fifo) as f,
    ):
        f.write(b"data")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_fifo_with_a_reader_is_written_through(tmp_path: Path) -> None:
    fifo = tmp_path / "out.dot"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_atomic(fifo, b"digraph {}\n")
        assert os.read(reader, 100) == b"digraph {}\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_socket_at_the_path_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s.svg"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(LbdlError, match=r"not a regular file \(a socket\)"):
            write_atomic(path, b"x")
    assert stat.S_ISSOCK(os.stat(path).st_mode)


@pytest.mark.parametrize(
    "argv, target",
    [
        (["build", "tiny.lbdl", "--emit", "dot", "-o", "out"], "out/tiny.dot"),
        (["diff", "tiny.lbdl", "tiny.lbdl", "--figure", "out/fig.dot"], "out/fig.dot"),
        (["export", "tiny.lbdl", "--format", "mlir", "-o", "out/m.mlir"], "out/m.mlir"),
    ],
)
def test_the_commands_keep_a_fifo(spec: Path, argv: list[str], target: str, monkeypatch,
                                  capsys) -> None:  # fmt: skip
    fifo = spec.parent / target
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    monkeypatch.chdir(spec.parent)
    rc, err = in_process(capsys, *argv)
    assert rc == 1
    assert f"error: {target}: a FIFO that no program is reading" in err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_export_keeps_a_fifo_from_the_command_line(spec: Path) -> None:
    os.mkfifo(spec.parent / "m.stablehlo")
    done = lbdl(spec.parent, "export", "tiny.lbdl", "--format", "stablehlo", "-o", "m.stablehlo")
    assert done.returncode == 1
    assert "error: m.stablehlo: a FIFO that no program is reading" in done.stderr
    assert stat.S_ISFIFO(os.stat(spec.parent / "m.stablehlo").st_mode)


# -- item 9: the same arrays, the same bytes -----------------------------------------------------


def test_safetensors_header_is_sorted_and_readable(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    params = {"b": np.ones(3, np.float32), "a": {"w": np.zeros((2, 2), np.float32)}}
    path = weights.save(tmp_path / "p.safetensors", params, {"m": np.arange(2.0)})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert list(header) == ["__metadata__", "params/a/w", "params/b", "state/m"]
    assert list(header["__metadata__"]) == ["format", "layout"]
    assert raw[8 : 8 + n].startswith(b'{"__metadata__":{"format":"lbdl","layout"')
    loaded = load_file(str(path))
    np.testing.assert_array_equal(loaded["state/m"], np.arange(2.0))


def test_a_training_writes_the_bytes_of_any_other_process(spec: Path) -> None:
    """`lbdl train` in another process, and its arrays saved again here: the same bytes (the
    reference writer's metadata order changed from one process to the next)."""
    done = lbdl(spec.parent, "train", "tiny.lbdl", "--data", "synthetic", "--steps", "2")
    assert done.returncode == 0, done.stderr
    written = spec.parent / "runs/tiny/params.safetensors"
    params, state = weights.split(weights.read(written))
    again = weights.save(spec.parent / "again.safetensors", weights.unflatten(params), state)
    assert written.read_bytes() == again.read_bytes()


def test_weights_save_is_the_same_bytes_in_other_processes(tmp_path: Path) -> None:
    script = (
        "import sys, numpy as np; from lbdl_dsl.backends.jax import weights; "
        "weights.save(sys.argv[1], {'w': np.arange(6.0).reshape(2, 3)}, {'s': np.ones(2)})"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    outs = []
    for i in range(4):
        path = tmp_path / f"{i}.safetensors"
        subprocess.run([sys.executable, "-c", script, str(path)], env=env, check=True)
        outs.append(path.read_bytes())
    assert all(o == outs[0] for o in outs)


# -- item 10: the import writer -----------------------------------------------------------------


def _stream(path: Path, data: np.ndarray) -> None:
    from lbdl_dsl.interop.writer import StreamWriter

    with StreamWriter(path, {"params/w": data.shape}) as w:
        w.write("params/w", data)


def test_the_import_writer_uses_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        _stream(tmp_path / "p.safetensors", np.ones((2, 3), np.float32))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "p.safetensors").st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["p.safetensors"]


def test_the_import_writer_sweeps_what_a_killed_run_left(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    left = tmp_path / f".p.safetensors.{dead}-0123abcd.tmp"
    left.write_bytes(b"\0" * 1000)
    _stream(tmp_path / "p.safetensors", np.ones(4, np.float32))
    assert sorted(os.listdir(tmp_path)) == ["p.safetensors"]


def test_the_import_writer_names_the_file_when_the_disk_is_full(tmp_path: Path) -> None:
    """A file that may not grow past 1,000 bytes (RLIMIT_FSIZE: EFBIG, as ENOSPC would be)."""
    script = (
        "import resource, sys, numpy as np\n"
        "from lbdl_dsl.interop.writer import StreamWriter\n"
        "from lbdl_dsl.core.errors import LbdlError\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "try:\n"
        "    with StreamWriter(sys.argv[1], {'params/w': (4096,)}) as w:\n"
        "        w.write('params/w', np.ones(4096, np.float32))\n"
        "except LbdlError as e:\n"
        "    print(e.first.message)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    target = tmp_path / "big.safetensors"
    done = subprocess.run([sys.executable, "-c", script, str(target)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.stdout.strip() == f"cannot write {target}: File too large", done.stderr
    assert os.listdir(tmp_path) == []


# -- item 6: files that are not what their suffix says -----------------------------------------


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _huge_header_npz(path: Path) -> None:
    """An .npz whose one member declares 2^40 float32 values and holds 16 bytes of them."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, header)
    member.write(b"\0" * 16)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("X.npy", member.getvalue())


BAD_NPZ = {
    "cut": lambda p: p.write_bytes(_npz_bytes(X=np.ones((8, 4), np.float32))[:200]),
    "npy": lambda p: p.write_bytes(_npy_bytes(np.ones(3))),
    "empty": lambda p: p.write_bytes(b""),
    "huge": _huge_header_npz,
    "objects": lambda p: np.savez(p, X=np.array([None, 1.0], dtype=object)),
}
BAD_NPZ_MESSAGES = {
    "cut": "File is not a zip file",
    "npy": "it is a single .npy array; save with numpy.savez",
    "empty": "it is empty",
    "huge": "`X` declares 1,099,511,627,776 values of float32 (4,398,046,511,104 bytes) but "
    "holds 16 bytes",
    # was "`X` declares 2 values of object (16 bytes) but holds ...": the pickle's size
    "objects": "`X` holds Python objects (dtype object), not numbers",
}


@pytest.mark.parametrize("kind", sorted(BAD_NPZ))
def test_bad_npz_training_data(spec: Path, kind: str, monkeypatch, capsys) -> None:
    BAD_NPZ[kind](spec.parent / "data.npz")
    monkeypatch.chdir(spec.parent)
    rc, err = in_process(capsys, "train", "tiny.lbdl", "--data", "data.npz", "--steps", "1")
    assert rc == 1
    assert f"error: --data data.npz: not a readable .npz file ({BAD_NPZ_MESSAGES[kind]}" in err
    assert not (spec.parent / "runs").exists()


def test_a_huge_npz_header_from_the_command_line(spec: Path) -> None:
    _huge_header_npz(spec.parent / "data.npz")
    done = lbdl(spec.parent, "train", "tiny.lbdl", "--data", "data.npz", "--steps", "1")
    assert done.returncode == 1
    assert f"error: --data data.npz: not a readable .npz file ({BAD_NPZ_MESSAGES['huge']}" in (
        done.stderr
    )


@pytest.mark.parametrize("kind", sorted(BAD_NPZ))
def test_bad_npz_weights(spec: Path, kind: str) -> None:
    path = spec.parent / "w.npz"
    BAD_NPZ[kind](path)
    with pytest.raises(LbdlError, match="not a readable .npz file"):
        lbdl_dsl.compile(spec).load(path)


def test_an_empty_weights_file_in_export_from_the_command_line(spec: Path) -> None:
    (spec.parent / "empty.npz").write_bytes(b"")  # was an EOFError from numpy: exit 3
    done = lbdl(spec.parent, "export", "tiny.lbdl", "--format", "mlir", "-o", "m.mlir",
                "--weights", "empty.npz")  # fmt: skip
    assert done.returncode == 1
    assert "error: empty.npz: not a readable .npz file (it is empty)" in done.stderr


def test_a_symlink_loop_as_weights(spec: Path) -> None:
    os.symlink("loop.safetensors", spec.parent / "loop.safetensors")
    with pytest.raises(LbdlError, match="cannot read .*loop.safetensors: Too many levels"):
        lbdl_dsl.compile(spec).load(spec.parent / "loop.safetensors")


def test_an_empty_test_split_is_refused_before_training(spec: Path, quiet=True) -> None:
    data = {"X": np.ones((8, 4), np.float32), "y": np.zeros(8, np.int32),
            "X_test": np.ones((0, 4), np.float32), "y_test": np.zeros(0, np.int32)}  # fmt: skip
    np.savez(spec.parent / "d.npz", **data)
    with pytest.raises(LbdlError, match="the test split is empty"):
        lbdl_dsl.train(spec, spec.parent / "d.npz", steps=1, quiet=True,
                       output_dir=spec.parent / "run")  # fmt: skip
    assert not (spec.parent / "run").exists()


# -- item 7: dtypes and finite values ----------------------------------------------------------


def _saved(spec: Path, change) -> Path:
    import jax

    model = lbdl_dsl.compile(spec)
    params, state = model.init(jax.random.key(0))
    flat = {f"params/{k}": np.array(v) for k, v in weights.flatten(params).items()}
    change(flat)
    path = spec.parent / "w.npz"
    np.savez(path, **flat)
    return path


def test_complex_weights_are_refused(spec: Path) -> None:
    path = _saved(spec, lambda f: f.update({"params/fc_0/w": f["params/fc_0/w"] + 1j}))
    with pytest.raises(LbdlError, match="`params/fc_0/w` holds complex64 values, not real"):
        lbdl_dsl.compile(spec).load(path)


def test_nan_weights_are_reported_and_the_export_check_fails(spec: Path) -> None:
    def nan(f):
        f["params/fc_0/w"][0, 0] = np.nan

    path = _saved(spec, nan)
    with pytest.raises(LbdlError, match="`params/fc_0/w`: 1 of 32 values are NaN or infinite"):
        lbdl_dsl.compile(spec).load(path)
    params, _ = lbdl_dsl.compile(spec).load(path, allow_nonfinite=True)
    assert np.isnan(params["fc_0"]["w"][0, 0])
    from lbdl_dsl.interop.exporter import relative_error

    assert np.isnan(relative_error([np.array([np.nan])], [np.array([np.nan])]))


# -- item 8: numbers past what a run takes -----------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "tiny.lbdl", "--data", "synthetic", "--steps", "1", "--seed", "-1"],
        ["export", "tiny.lbdl", "--format", "mlir", "-o", "m.mlir", "--seed", str(2**70)],
    ],
)
def test_out_of_range_seeds_in_train_and_export(spec: Path, argv: list[str]) -> None:
    done = lbdl(spec.parent, *argv)
    assert done.returncode == 1
    assert "seed" in done.stderr and "2^63−1" in done.stderr


@pytest.mark.parametrize("verb", ["train", "export"])
@pytest.mark.parametrize("seed", ["-1", str(2**70)])
def test_out_of_range_seeds_in_process(spec: Path, verb: str, seed: str, monkeypatch,
                                       capsys) -> None:  # fmt: skip
    monkeypatch.chdir(spec.parent)
    more = ["--data", "synthetic", "--steps", "1"] if verb == "train" else ["--format", "mlir"]
    rc, err = in_process(capsys, verb, "tiny.lbdl", *more, "--seed", seed)
    assert rc == 1
    assert "seed" in err and "2^63−1" in err


def test_a_huge_export_batch_is_refused(spec: Path) -> None:
    from lbdl_dsl.interop.exporter import export

    with pytest.raises(LbdlError, match=r"--batch 1099511627776: more than 2\^31−1 samples"):
        export(spec, spec.parent / "m.stablehlo", batch=2**40)
    with pytest.raises(LbdlError, match="the check's example inputs would take 32,000,000,000"):
        export(spec, spec.parent / "m.stablehlo", batch=2_000_000_000)
    with pytest.raises(ArgumentError, match="seed must be a whole number, got '1'"):
        export(spec, spec.parent / "m.stablehlo", seed="1")  # type: ignore[arg-type]


# -- item 11: smaller faults ---------------------------------------------------------------------


def test_a_name_past_the_limit_is_refused_at_its_place(tmp_path: Path) -> None:
    path = tmp_path / "long.lbdl"
    path.write_text(f"model {'a' * 20_000}:\n  input X: 4\n  fc 2\n", "utf-8")
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(path)
    assert info.value.first.message == "a name of 20,000 characters; the limit is 256"
    assert (info.value.first.span.line, info.value.first.span.column) == (1, 7)
    path.write_text(f"# {'a' * 20_000}\nmodel m:\n  input X: 4\n  fc 2\n", "utf-8")
    lbdl_dsl.check(path)  # a long word in a comment is no name


def test_diff_reads_a_path_of_any_suffix_as_a_file(spec: Path) -> None:
    (spec.parent / "copy.txt").write_text(TINY, "utf-8")
    done = lbdl(spec.parent, "diff", "tiny.lbdl", "copy.txt")
    assert done.returncode == 0, done.stderr
    done = lbdl(spec.parent, "diff", "tiny.lbdl", "nosuch.txt")
    assert done.returncode == 1
    assert "no such file: nosuch.txt" in done.stderr


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s: lbdl_dsl.train(s, "synthetic", steps=1, lr="x", quiet=True), "--lr: 'x'"),
        (lambda s: lbdl_dsl.train(s, "synthetic", steps=1, keep=None, quiet=True), "--keep"),
        (lambda s: lbdl_dsl.train(s, "synthetic", steps=1, overrides=[1]), "overrides must be"),
        (lambda s: lbdl_dsl.compile(s).load(5), "path must be a file name"),
        (lambda s: lbdl_dsl.compile(s).save("p.safetensors", 5), "params must be the nested"),
    ],
)
def test_the_python_api_raises_argument_errors(spec: Path, call, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        call(spec)


def test_init_with_something_that_is_no_key(spec: Path) -> None:
    import jax

    model = lbdl_dsl.compile(spec)
    with pytest.raises(ArgumentError, match="key must be a JAX random key, got int"):
        model.init(5)
    params, _ = jax.eval_shape(model.init, jax.random.key(0))  # traced keys are keys
    assert params["fc_0"]["w"].shape == (4, 8)
