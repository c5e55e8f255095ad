"""benchmarks/verifier.py's prime hands its trusted stubs, and nothing else, to the passes."""

from __future__ import annotations

from pathlib import Path

from benchmarks.verifier import seed_stubs
from services.verifier.options import VerifyOptions
from services.verifier.pool import stubs_dir


def _touch(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_only_the_stubs_reach_the_pass_cache(tmp_path: Path) -> None:
    prime, cold = tmp_path / "prime", tmp_path / "cold"
    stubs = stubs_dir(VerifyOptions(device="cuda", cache_dir=str(prime)))  # where pools put them
    _touch(stubs / "ab12" / "cuda_utils.so")
    _touch(stubs / "cd34" / "__triton_launcher.so")
    _touch(prime / "compile" / "ef56" / "kernel.cubin")  # a candidate's compile: stays cold
    _touch(cold / "stubs" / "cuda-older" / "kept.so")  # what the pass cache had stays

    assert seed_stubs(prime, cold) == [stubs.name]  # the prime's stub sets
    seeded = stubs_dir(VerifyOptions(device="cuda", cache_dir=str(cold)))
    assert (seeded / "ab12" / "cuda_utils.so").read_text() == "x"
    assert (seeded / "cd34" / "__triton_launcher.so").is_file()
    assert (cold / "stubs" / "cuda-older" / "kept.so").is_file()
    assert not (cold / "compile").exists()


def test_a_prime_without_stubs_seeds_nothing(tmp_path: Path) -> None:
    _touch(tmp_path / "prime" / "compile" / "ef56" / "kernel.cubin")
    assert seed_stubs(tmp_path / "prime", tmp_path / "cold") == []
    assert not (tmp_path / "cold").exists()
