"""The parser's cached tables (issue 17, item 15): JSON checked whole before use, never a pickle.

Lark's own cache is a pickle in the user's cache folder, and loading one runs whatever it says.
Ours is JSON stamped with the grammar and lark's version and carrying its own SHA-256: an edited,
truncated or foreign file is rebuilt, and the parser it gives parses exactly as a fresh one.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from lbdl_dsl.compiler import parser

SPECS = Path(__file__).resolve().parents[2] / "specs"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    parser._lark.cache_clear()
    yield tmp_path / "lbdl" / f"parser-tables.v{parser._TABLES_FORMAT}.json"
    parser._lark.cache_clear()


class _Runs:
    """A pickle that, once loaded, would create a file: the proof that a loader ran it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_tables_are_written_then_read(cache_dir: Path) -> None:
    fresh = parser._lark()
    assert cache_dir.is_file()
    stored = json.loads(cache_dir.read_text("utf-8"))
    assert stored["stamp"] == parser._stamp()
    loaded = parser._load_tables(cache_dir)
    assert loaded is not None
    for spec in ("resnet50", "gpt2", "unet", "whisper"):
        text = (SPECS / f"{spec}.lbdl").read_text("utf-8")
        assert loaded.parse(text) == fresh.parse(text)


@pytest.mark.parametrize("damage", ["edited", "truncated", "stale", "pickle", "not json"])
def test_a_damaged_cache_is_never_trusted(cache_dir: Path, tmp_path: Path, damage: str) -> None:
    parser._lark()
    stored = json.loads(cache_dir.read_text("utf-8"))
    marker = tmp_path / "ran"
    if damage == "edited":  # a table entry changed, the digest left as it was
        tables = json.loads(stored["tables"])
        tables["d"][0][1] = {"d": []}
        stored["tables"] = json.dumps(tables)
        cache_dir.write_text(json.dumps(stored), "utf-8")
    elif damage == "truncated":
        cache_dir.write_text(json.dumps(stored)[:5000], "utf-8")
    elif damage == "stale":
        stored["stamp"] = "0" * 64
        cache_dir.write_text(json.dumps(stored), "utf-8")
    elif damage == "pickle":
        cache_dir.write_bytes(pickle.dumps(_Runs(marker)))
    else:
        cache_dir.write_bytes(b"\x00\xff binary")
    assert parser._load_tables(cache_dir) is None
    parser._lark.cache_clear()
    module = parser.parse("model m:\n  input X: 3\n  relu\n", "m.lbdl")
    assert module.models[0].name == "m"
    assert not marker.exists()
    assert parser._load_tables(cache_dir) is not None  # rebuilt and rewritten


def test_an_unwritable_cache_only_costs_time(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", "utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the folder would be
    parser._lark.cache_clear()
    try:
        assert parser.parse("model m:\n  input X: 3\n  relu\n", "m.lbdl").models
    finally:
        parser._lark.cache_clear()
