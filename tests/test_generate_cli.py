"""`lbdl generate` as a user runs it: a run folder of a character model (its vocabulary and
sizes from run.json), a parameters file with a tokenizer.json, `--json`, and each refusal as
one message and exit 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import pytest

import lbdl_dsl
from lbdl_dsl.cli import main

REPO = Path(__file__).resolve().parents[1]
GPT = str(REPO / "specs" / "gpt.lbdl")
VOCAB = "\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
SIZES = {"N": "1", "D": "16", "H": "2", "V": str(len(VOCAB)), "T": "24"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run folder as `lbdl train ... --data shakespeare` leaves one (its parameters drawn)."""
    folder = tmp_path_factory.mktemp("run")
    model = lbdl_dsl.compile(GPT, **SIZES)
    params, state = model.init(jax.random.key(0))
    model.save(folder / "params.safetensors", params, state)
    record = {
        "config": {"spec": GPT, "data": "shakespeare", "overrides": SIZES},
        "data": {"name": "shakespeare", "vocab": VOCAB},
    }
    (folder / "run.json").write_text(json.dumps(record))
    return folder


def generate(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["generate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_run_folder_writes_text_and_a_seed_repeats_it(run_dir: Path, capsys) -> None:
    code, first, err = generate(
        capsys, "--params", str(run_dir), "--prompt", "ROMEO:", "--max-new", "12", "--seed", "3"
    )
    assert code == 0, err
    assert first.startswith("ROMEO:") and len(first.rstrip("\n")) >= len("ROMEO:") + 1
    assert set(first[6:]) <= set(VOCAB)
    _, again, _ = generate(
        capsys, "--params", str(run_dir), "--prompt", "ROMEO:", "--max-new", "12", "--seed", "3"
    )
    assert again == first


def test_json_has_ids_text_and_logprobs(run_dir: Path, capsys) -> None:
    code, out, err = generate(
        capsys,
        GPT,
        "--params",
        str(run_dir),
        "--prompt",
        "To be",
        "--max-new",
        "5",
        "--greedy",
        "--json",
    )
    assert code == 0, err
    record = json.loads(out)
    assert record["prompt_ids"] == [VOCAB.index(c) for c in "To be"]
    assert len(record["ids"]) == len(record["logprobs"]) == 5
    assert record["text"] == "".join(VOCAB[i] for i in record["ids"])
    assert all(lp <= 0 for lp in record["logprobs"])


def test_a_params_file_with_a_tokenizer(run_dir: Path, capsys) -> None:
    tokenizer = REPO / "tests" / "fixtures" / "hf" / "gpt2" / "tokenizer.json"
    sizes = [f"{k}={v}" for k, v in {**SIZES, "V": "96"}.items()]
    model = lbdl_dsl.compile(GPT, **{**SIZES, "V": "96"})
    params, state = model.init(jax.random.key(1))
    path = run_dir.parent / "p96.safetensors"
    model.save(path, params, state)
    code, out, err = generate(
        capsys,
        GPT,
        "--set",
        *sizes,
        "--params",
        str(path),
        "--tokenizer",
        str(tokenizer),
        "--prompt",
        "The king",
        "--max-new",
        "4",
        "--json",
    )
    assert code == 0, err
    assert len(json.loads(out)["ids"]) <= 4  # it stops early at the end-of-text id, if drawn


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt", "x" * 30], "exceed the model's context of 24"),
        (["--prompt", "€uro"], "characters the model never saw: '€'"),
        (["--prompt", "hi", "--greedy", "--top-k", "3"], "--greedy takes the most likely"),
        (["--prompt", "hi", "--top-p", "1.5"], "--top-p must be a number in (0, 1], got 1.5"),
        (["--prompt", "hi", "--temperature", "0"], "--temperature must be a positive number"),
        (["--prompt", "hi", "--temperature", "nan"], "--temperature must be a positive number"),
        (["--prompt", "hi", "--top-k", "-2"], "--top-k must be a whole number ≥ 0, got -2"),
        (["--prompt", "hi", "--max-new", "-1"], "--max-new must be a whole number ≥ 0, got -1"),
        (["--prompt", "hi", "--set", "T=abc"], "--set T=abc: T is the sequence's length"),
        (["--prompt", "hi", "--set", "T=0"], "--set T=0: T is the sequence's length"),
        (
            ["--prompt", "hi", "--tokenizer", str(REPO / "tests/fixtures/hf/gpt2/tokenizer.json")],
            f"has 96 tokens, more than the model's vocabulary of {len(VOCAB)}",
        ),
    ],
)
def test_refusals_are_one_message(run_dir: Path, capsys, argv: list[str], message: str) -> None:
    code, _, err = generate(capsys, "--params", str(run_dir), *argv)
    assert code == 1
    assert message in err
    assert "Traceback" not in err


def test_a_params_path_that_does_not_exist_is_named(tmp_path: Path, capsys) -> None:
    # it was told "a parameters file needs the SPEC it belongs to"
    code, _, err = generate(capsys, "--params", str(tmp_path / "gone"), "--prompt", "hi")
    assert code == 1 and f"--params {tmp_path / 'gone'}: no such file or folder" in err


def test_a_spec_that_cannot_generate_and_tensors_that_do_not_fit(run_dir: Path, capsys) -> None:
    code, _, err = generate(
        capsys,
        str(REPO / "specs" / "mlp.lbdl"),
        "--params",
        str(run_dir / "params.safetensors"),
        "--prompt",
        "hi",
    )
    assert code == 1 and "not one sequence of tokens" in err and "Traceback" not in err
    sizes = [f"{k}={v}" for k, v in {**SIZES, "D": "32"}.items()]
    code, _, err = generate(
        capsys,
        GPT,
        "--set",
        *sizes,
        "--params",
        str(run_dir / "params.safetensors"),
        "--prompt",
        "hi",
    )
    assert code == 1 and "Traceback" not in err
    assert "do not fit this model" in err and "the model needs (32, 32)" in err


def test_a_checkpoint_folder_and_a_spec_that_does_not_fit_it(tmp_path: Path, capsys) -> None:
    """A Hugging Face folder generates through from_pretrained, its tokenizer and its end id;
    beside a SPEC of other sizes it is refused, naming the tensors that differ."""
    pytest.importorskip("lbdl_dsl.interop.hf")
    folder = str(REPO / "tests" / "fixtures" / "hf" / "gpt2")
    code, out, err = generate(
        capsys, "--params", folder, "--prompt", "The king", "--greedy", "--max-new", "6", "--json"
    )
    assert code == 0, err
    assert len(json.loads(out)["ids"]) <= 6
    code, _, err = generate(
        capsys,
        str(REPO / "specs" / "gpt2.lbdl"),
        "--set",
        "N=2",
        "D=64",
        "H=4",
        "V=96",
        "L=64",
        "--params",
        folder,
        "--prompt",
        "The king",
    )
    assert code == 1 and "does not fit the spec" in err and "Traceback" not in err


def test_a_run_whose_spec_has_moved_says_so(run_dir: Path, tmp_path: Path, capsys) -> None:
    # it was reported as `gone.lbdl:1:1: error: no such file`, as if the user had named it
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "params.safetensors").write_bytes((run_dir / "params.safetensors").read_bytes())
    record = json.loads((run_dir / "run.json").read_text())
    record["config"]["spec"] = str(tmp_path / "gone.lbdl")
    (moved / "run.json").write_text(json.dumps(record))
    code, _, err = generate(capsys, "--params", str(moved), "--prompt", "hi")
    assert code == 1 and f"the run's spec {tmp_path / 'gone.lbdl'} is not found" in err, err
    assert "give the SPEC" in err
    code, out, err = generate(
        capsys, GPT, "--params", str(moved), "--prompt", "hi", "--max-new", "2"
    )
    assert code == 0 and out.startswith("hi"), err


def test_a_cache_beyond_the_machine_is_out_of_memory_not_a_bug(capsys) -> None:
    # LLaMA's rotary positions set no length: --max-new 10**12 asks XLA for a 64 TiB cache,
    # whose RESOURCE_EXHAUSTED was an internal error (exit 3)
    llama = REPO / "tests" / "fixtures" / "hf" / "llama"
    code, out, err = generate(
        capsys, "--params", str(llama), "--prompt", "hi", "--max-new", str(10**12), "--greedy"
    )
    assert code == 1 and "Traceback" not in err and out == ""  # not even the prompt
    assert err.startswith("error: out of memory (RESOURCE_EXHAUSTED") and "--max-new" in err, err


def test_a_prompt_that_starts_with_a_dash_is_shown_how(run_dir: Path, capsys) -> None:
    try:
        code = main(["generate", "--params", str(run_dir), "--prompt", "-hi"])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 1 and "argument --prompt: expected one argument" in err
    assert "one that starts with '-' is written --prompt=VALUE" in err
    code, _, err = generate(capsys, "--params", str(run_dir), "--prompt=-hi")
    assert code == 1 and "characters the model never saw: '-'" in err  # read as the prompt


def test_a_checkpoint_chooses_tokens_as_its_generation_config_says(tmp_path: Path, capsys) -> None:
    """With no --greedy, --temperature, --top-k or --top-p, a Hugging Face folder generates as
    transformers' generate() would: greedy without do_sample (the fixture's), and with it the
    file's temperature and top-p and transformers' top-k of 50; a note says which. A flag
    overrides it, and a damaged file is refused naming it."""
    fixture = REPO / "tests" / "fixtures" / "hf" / "llama"
    ask = ["--prompt", "The king is dead", "--max-new", "8", "--json"]
    code, default, err = generate(capsys, "--params", str(fixture), *ask)
    assert code == 0 and "note: greedy, as transformers' generate() is without do_sample" in err
    assert default == generate(capsys, "--params", str(fixture), *ask, "--greedy")[1]
    folder = tmp_path / "llama"
    shutil.copytree(fixture, folder)
    said = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "eos_token_id": 2}
    (folder / "generation_config.json").write_text(json.dumps(said))
    code, sampled, err = generate(capsys, "--params", str(folder), *ask, "--seed", "4")
    assert code == 0
    assert f"note: sampling at temperature 0.6, top-k 50, top-p 0.9, as {folder}" in err
    flags = ["--temperature", "0.6", "--top-k", "50", "--top-p", "0.9", "--seed", "4"]
    assert sampled == generate(capsys, "--params", str(folder), *ask, *flags)[1]
    assert sampled != default
    code, _, err = generate(capsys, "--params", str(folder), *ask, "--greedy")
    assert code == 0 and "note:" not in err
    said |= {"repetition_penalty": 1.3, "num_beams": 1}
    (folder / "generation_config.json").write_text(json.dumps(said))
    code, again, err = generate(capsys, "--params", str(folder), *ask, "--seed", "4")
    assert code == 0 and again == sampled
    assert "generation_config.json's repetition_penalty 1.3 not applied" in err
    assert "num_beams" not in err
    (folder / "generation_config.json").write_text("{not json")
    code, _, err = generate(capsys, "--params", str(folder), *ask)
    assert code == 1 and "generation_config.json: not a readable JSON file" in err


def test_a_run_named_by_a_relative_path_is_found_from_anywhere(
    run_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """run.json keeps the spec as `lbdl train` was given it (relative to where it ran) and its
    absolute path: a run nested deeper than runs/NAME, used from another folder, still finds
    its spec, and evaluate applies the run's --set values to it (the same spec)."""
    nested = tmp_path / "work" / "runs" / "exp" / "gpt"
    nested.mkdir(parents=True)
    (nested / "params.safetensors").write_bytes((run_dir / "params.safetensors").read_bytes())
    record = json.loads((run_dir / "run.json").read_text())
    record["config"]["spec"] = "specs/gpt.lbdl"  # relative to the repository, where it ran
    (nested / "run.json").write_text(json.dumps(record))
    monkeypatch.chdir(tmp_path)
    code, _, err = generate(capsys, "--params", str(nested), "--prompt", "hi", "--max-new", "2")
    assert code == 1 and "tried specs/gpt.lbdl" in err
    record["spec_file"] = GPT
    (nested / "run.json").write_text(json.dumps(record))
    code, out, err = generate(capsys, "--params", str(nested), "--prompt", "hi", "--max-new", "2")
    assert code == 0 and out.startswith("hi"), err
    from lbdl_dsl.training.evaluate import run_facts

    assert run_facts(nested, GPT).overrides == SIZES


def test_another_spec_than_the_run_s_is_told_why_the_run_s_sizes_do_not_fit(
    run_dir: Path, capsys
) -> None:
    """The run's --set values go with any SPEC given (a copy of the run's spec needs them);
    where they do not fit, the refusal says they are the run's, not the user's."""
    other = str(REPO / "specs" / "digits-cnn.lbdl")
    code, _, err = generate(capsys, other, "--params", str(run_dir), "--prompt", "hi")
    assert code == 1 and f"is not the spec of the run {run_dir}" in err
    assert "the run's --set N=1 D=16" in err and "has no parameter `N` to set" in err
    assert f"lbdl generate --params {run_dir}" in err
