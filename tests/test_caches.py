"""The cache folders: one variable per kind (kernels, data), the older names still read, XDG as the root."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashtrie.caches import DATA_CACHE_VARS, KERNEL_CACHE_VARS, data_cache_dir, kernel_cache_dir

ALL = (*KERNEL_CACHE_VARS, *DATA_CACHE_VARS)


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ALL:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return monkeypatch


def test_defaults_are_two_folders_under_one_root(clean, tmp_path) -> None:
    assert kernel_cache_dir() == tmp_path / "xdg" / "flashtrie" / "kernels"
    assert data_cache_dir() == tmp_path / "xdg" / "flashtrie" / "real"


def test_the_new_names_win_and_the_old_ones_are_still_read(clean, tmp_path) -> None:
    clean.setenv("FLASHTRIE_CACHE", str(tmp_path / "old-k"))
    clean.setenv("FLASHTRIE_CACHE_DIR", str(tmp_path / "old-d"))
    assert (kernel_cache_dir(), data_cache_dir()) == (tmp_path / "old-k", tmp_path / "old-d")
    clean.setenv("FLASHTRIE_KERNEL_CACHE", str(tmp_path / "k"))
    clean.setenv("FLASHTRIE_DATA_CACHE", str(tmp_path / "d"))
    assert (kernel_cache_dir(), data_cache_dir()) == (tmp_path / "k", tmp_path / "d")


def test_the_kernel_compiler_and_the_real_libraries_use_them(clean, tmp_path) -> None:
    from flashtrie.datasets.real.cache import default_cache_dir
    from flashtrie.gpu_impl.compile import cache_dir

    clean.setenv("FLASHTRIE_KERNEL_CACHE", str(tmp_path / "k"))
    clean.setenv("FLASHTRIE_DATA_CACHE", str(tmp_path / "d"))
    assert cache_dir() == tmp_path / "k" and default_cache_dir() == tmp_path / "d"
    assert default_cache_dir(tmp_path / "given") == tmp_path / "given"
