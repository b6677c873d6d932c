"""The user's cache folder: made where it can be, refused where it cannot."""

from __future__ import annotations

from lbdl_dsl.core import cache


def test_the_folder_is_made_under_the_user_s_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.folder() == tmp_path / "lbdl" and (tmp_path / "lbdl").is_dir()


def test_no_folder_means_no_cache(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(not_a_folder))
    assert cache.folder() is None
