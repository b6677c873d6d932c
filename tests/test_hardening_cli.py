"""Bad flags, bad runs and the operating system's refusals, through `lbdl-compile` (issue 17).

Each is the user's error: exit 1, a message naming the flag or the path, a hint, no traceback,
and nothing of theirs lost. The messages are pinned whole, as goldens are.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from lbdl_dsl import __version__
from lbdl_dsl.cli import compat as cli

MLP = "model m:\n  input X: 8\n  fc 4\n"
FREE = "model m:\n  input X: T×8\n  fc out=4\n"


def spec(tmp_path: Path, text: str = MLP, name: str = "m.lbdl") -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def flag_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    assert info.value.code == 1
    assert out == ""
    return err.split("\n", 1)[1] if err.startswith("usage") else err


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"lbdl-compile {__version__}\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--depth", "-5"], "--depth takes a whole number ≥ 0 or `all`, got -5"),
        (["--depth", "deep"], "--depth takes a whole number ≥ 0 or `all`, got 'deep'"),
        (["-o", ""], "argument -o/--output: a folder name, got an empty one"),
        (["--batch", "-1"], "argument --batch: a whole number ≥ 1, got '-1'"),
        (["--batch", "0"], "argument --batch: a whole number ≥ 1, got '0'"),
    ],
)
def test_bad_flags(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    err = flag_error(capsys, str(spec(tmp_path)), "--check", *argv)
    assert err.endswith(f"lbdl-compile: error: {message}\nhint: see `lbdl-compile --help`\n"), err


def test_run_with_a_free_symbol_is_the_users_error(tmp_path: Path, capsys) -> None:
    rc, _, err = run(capsys, str(spec(tmp_path, FREE)), "--check", "--run")
    assert rc == 1
    assert err == (
        "error: --run needs a value for every size, and T is left symbolic\n"
        "hint: give it values: --set T=...\n"
    )


def test_run_needing_more_memory_than_the_machine_has(tmp_path: Path, capsys) -> None:
    rc, _, err = run(
        capsys, str(spec(tmp_path, FREE)), "--check", "--run", "--set", "T=1000000", "--batch",
        "100000000",
    )  # fmt: skip
    assert rc == 1
    first, hint = err.rstrip("\n").split("\n")
    assert first.startswith("error: --run would need about 4.3 PiB for a batch of 100000000")
    assert hint == "hint: run a smaller batch (--batch), or smaller sizes (--set)"


# -- files -------------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="permissions")
def test_an_unwritable_folder(tmp_path: Path, capsys) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        rc, _, err = run(capsys, str(spec(tmp_path)), "--emit", "json", "-o", str(locked / "out"))
    finally:
        locked.chmod(0o700)
    assert rc == 1
    assert err.split("\n")[-3:] == [
        f"error: cannot create the folder {locked / 'out'}: Permission denied",
        "hint: check the permissions of the file and its folders, or choose another place",
        "",
    ]


def test_a_folder_where_the_file_goes(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    (out / "m.json").mkdir(parents=True)
    rc, _, err = run(capsys, str(spec(tmp_path)), "--emit", "json", "-o", str(out))
    assert rc == 1
    assert err.split("\n")[-3:] == [
        f"error: cannot write {out / 'm.json'}: Is a directory",
        "hint: a folder has the name of the file; remove it or choose another place",
        "",
    ]


def test_a_file_where_the_folder_goes(tmp_path: Path, capsys) -> None:
    (tmp_path / "out").write_text("mine", "utf-8")
    rc, _, err = run(capsys, str(spec(tmp_path)), "--emit", "json", "-o", str(tmp_path / "out"))
    assert rc == 1
    assert "error: cannot create the folder" in err and "hint:" in err
    assert (tmp_path / "out").read_text("utf-8") == "mine"


def test_a_symlink_loop_as_the_spec(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.lbdl").symlink_to(tmp_path / "b.lbdl")
    (tmp_path / "b.lbdl").symlink_to(tmp_path / "a.lbdl")
    rc, _, err = run(capsys, str(tmp_path / "a.lbdl"), "--check")
    assert rc == 1
    assert err.startswith(f"{tmp_path / 'a.lbdl'}:1:1: error: cannot read {tmp_path / 'a.lbdl'}")
    assert "hint: a symbolic link on the path points, through others, back to itself" in err


def test_outputs_follow_the_umask_and_keep_a_replaced_files_mode(tmp_path: Path, capsys) -> None:
    old = os.umask(0o022)
    try:
        rc, _, _ = run(capsys, str(spec(tmp_path)), "--emit", "json,shapes", "-o", str(tmp_path))
        assert rc == 0
        assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == 0o644
        (tmp_path / "m.json").chmod(0o640)
        rc, _, _ = run(capsys, str(spec(tmp_path)), "--emit", "json", "-o", str(tmp_path))
        assert rc == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == 0o640
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_temporary_file_left_by_a_killed_run_is_swept(tmp_path: Path) -> None:
    from lbdl_dsl.output import write_atomic

    dead = 2**22 + 12345  # above the usual pid_max: no such process
    stray = tmp_path / f".m.json.{dead}-0123abcd.tmp"
    stray.write_text("half", "utf-8")
    other = tmp_path / ".notes.tmp"  # not ours: left alone
    other.write_text("keep", "utf-8")
    write_atomic(tmp_path / "m.json", "{}")
    assert not stray.exists()
    assert other.read_text("utf-8") == "keep"
    assert (tmp_path / "m.json").read_text("utf-8") == "{}"


# -- imports -----------------------------------------------------------------------------------


def test_an_import_linking_to_another_file_never_echoes_it(tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:the first line of a password file\n", "utf-8")
    project = tmp_path / "project"
    project.mkdir()
    (project / "lib.lbdl").symlink_to(secret)
    main = spec(project, 'import "lib.lbdl"\n' + MLP, "main.lbdl")
    rc, _, err = run(capsys, str(main), "--check")
    assert rc == 1
    assert "root:x" not in err
    assert "cannot import `lib.lbdl`: it is outside the spec's folder" in err


def test_a_link_inside_the_folder_to_a_file_not_a_spec(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes.txt").write_text("root:x:0:0\n", "utf-8")
    (tmp_path / "lib.lbdl").symlink_to(tmp_path / "notes.txt")
    main = spec(tmp_path, 'import "lib.lbdl"\n' + MLP, "main.lbdl")
    rc, _, err = run(capsys, str(main), "--check")
    assert rc == 1
    assert "root:x" not in err
    assert "it is a link to a file that is not a .lbdl spec" in err


def test_an_absolute_import_is_refused(tmp_path: Path, capsys) -> None:
    lib = spec(tmp_path, "block b on C:\n  relu\n", "lib.lbdl")
    main = spec(tmp_path, f'import "{lib}"\n' + MLP, "main.lbdl")
    rc, _, err = run(capsys, str(main), "--check")
    assert rc == 1
    assert err.startswith(
        f"{main}:1:1: error: cannot import `{lib}`: an import is a path relative to the "
        "importing file"
    )


def test_an_import_found_through_the_search_path(tmp_path: Path) -> None:
    import lbdl_dsl

    shared = tmp_path / "shared"
    shared.mkdir()
    spec(shared, "block twice on C:\n  relu\n  relu\n", "lib.lbdl")
    project = tmp_path / "project"
    project.mkdir()
    main = spec(project, 'import "lib.lbdl"\nmodel m:\n  input X: 8\n  twice\n', "main.lbdl")
    with pytest.raises(lbdl_dsl.LbdlError, match="no such file"):
        lbdl_dsl.check(main)
    assert lbdl_dsl.check(main, import_path=[shared]).ok


# -- what reaches the terminal -----------------------------------------------------------------


def test_control_characters_never_reach_the_terminal(tmp_path: Path, capsys) -> None:
    path = spec(tmp_path, 'model m:\n  input X: 8\n  fc 4 -> "a\x1b[2Jb"\n  relu(\x07)\n')
    rc, out, err = run(capsys, str(path), "--check")
    assert rc == 1
    assert "\x1b" not in err + out and "\x07" not in err + out


def test_graphviz_escapes_are_shown_as_written() -> None:
    from lbdl_dsl.backends.diagram.dot import h, q

    assert "\\N" not in q("a\\Nb") and "\\G" not in h("x\\G")
    assert q('say "hi"') == '"say \\"hi\\""'
    assert "\x0c" not in q("form\x0cfeed")


def test_the_figure_is_bounded_and_says_so(tmp_path: Path, capsys) -> None:
    """Block calls expanded (`--expand all`) once drew 16,000 boxes and took Graphviz 24 GB;
    the model checks, the figure is refused with the count and what to do."""
    from lbdl_dsl.backends.diagram import MAX_DRAWN_BOXES

    calls = MAX_DRAWN_BOXES // 100 + 1
    text = "block b on C:\n" + "  relu\n" * 100 + "model m:\n  input X: 4\n" + "  b\n" * calls
    path = spec(tmp_path, text)
    rc, _, err = run(capsys, str(path), "--emit", "dot", "-o", str(tmp_path), "--expand", "all")
    assert rc == 1
    assert err.split("\n")[-3:-1] == [
        f"error: the figure with --expand all would draw {calls * 100:,} boxes; the limit is "
        f"{MAX_DRAWN_BOXES:,}",
        "hint: open fewer block calls (--expand a block's name, or a depth such as 1), or leave "
        "the figure out (--emit without svg/png/pdf/dot)",
    ]
    rc, _, _ = run(capsys, str(path), "--emit", "dot", "-o", str(tmp_path))
    assert rc == 0 and (tmp_path / "m.dot").is_file()
