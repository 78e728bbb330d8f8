"""A vLLM start that died on a compile-cache file a killed compile left truncated: the entry is found and removed."""

from __future__ import annotations

from pathlib import Path

from deploy.compile_cache import broken_entry, remove_broken_entry

# the worker's line, as vLLM CPU 0.32 wrote it on 2026-12-06 (the key shortened)
LINE = ("(Worker pid=29725) ERROR 12-07 00:03:32 [multiproc_executor.py:1063] torch._inductor.exc.InductorError: "
        "ImportError: {root}/torch_compile_cache/torch_aot_compile/b3391a1c/inductor_cache/ho/chottc7.main.so: "
        "file too short")


def _cache(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "vllm"
    broken = root / "torch_compile_cache" / "torch_aot_compile" / "b3391a1c"
    (broken / "inductor_cache" / "ho").mkdir(parents=True)
    (broken / "inductor_cache" / "ho" / "chottc7.main.so").write_bytes(b"")
    other = root / "torch_compile_cache" / "torch_aot_compile" / "8bc9c99f"
    other.mkdir(parents=True)
    (other / "model.so").write_bytes(b"\x7fELF")
    return root, broken, other


def test_the_truncated_entry_and_only_it_is_removed(tmp_path: Path) -> None:
    root, broken, other = _cache(tmp_path)
    log = "INFO starting\n" + LINE.format(root=root) + "\nRuntimeError: Engine core initialization failed.\n"
    assert broken_entry(log) == broken
    assert remove_broken_entry(log) == broken
    assert not broken.exists() and (other / "model.so").read_bytes() == b"\x7fELF"
    assert remove_broken_entry(log) is None  # already gone: nothing more to remove, so no second retry


def test_a_log_without_a_truncated_cache_file_names_nothing(tmp_path: Path) -> None:
    root, broken, _ = _cache(tmp_path)
    assert broken_entry("RuntimeError: Engine core initialization failed. See root cause above.") is None
    assert broken_entry(f"ImportError: {root}/elsewhere/x.so: file too short") is None  # not the compile cache
    assert broken_entry(f"ImportError: {root}/torch_compile_cache/x.so: file too short") is None  # no entry level
    assert remove_broken_entry("OSError: [Errno 24] Too many open files") is None and broken.exists()
