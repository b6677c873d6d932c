"""The user's cache folder: sealed files, misses for anything broken, and ruff's answers kept."""

from __future__ import annotations

import subprocess

import pytest

from lbdl_dsl.backends.jax import codegen
from lbdl_dsl.core import cache


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "lbdl"


def test_text_round_trips_and_broken_files_are_misses(home):
    assert cache.read_text("a.py") is None
    cache.write_text("a.py", "x = 1\n")
    assert cache.read_text("a.py") == "x = 1\n"
    whole = (home / "a.py").read_text()
    (home / "a.py").write_text(whole[:-2])  # cut short
    assert cache.read_text("a.py") is None
    (home / "a.py").write_bytes(b"\xff\xfe")
    assert cache.read_text("a.py") is None
    assert not list(home.glob("*.tmp"))


def test_no_folder_means_no_cache(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(not_a_folder))
    assert cache.folder() is None
    cache.write_text("a.py", "x = 1\n")
    assert cache.read_text("a.py") is None


def test_ruff_runs_once_per_text(home, monkeypatch):
    pytest.importorskip("ruff")
    text = "def f( a ):\n  return a\n"
    first = codegen.format_source(text)
    assert first == "def f(a):\n    return a\n"

    def refuse(*_a, **_k):
        raise AssertionError("ruff ran again")

    monkeypatch.setattr(subprocess, "run", refuse)
    assert codegen.format_source(text) == first
    (next(home.glob("*.py"))).write_text("garbage")  # a broken entry is formatted again
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(home.parent))
    assert codegen.format_source(text) == first
