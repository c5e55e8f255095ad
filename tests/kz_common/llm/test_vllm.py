"""vLLM offline backend: a clear error without vLLM; a real run where vLLM and a GPU exist."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kz_common.llm.backends import AdapterRef, BackendSettings, make_backend
from kz_common.llm.exceptions import BackendUnavailable
from schemas.events import Sampling

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed: the missing-dependency path cannot occur")
def test_missing_vllm_is_a_clear_error(tiny_model: Path) -> None:
    with pytest.raises(BackendUnavailable, match=r"pip install 'kernelzero\[vllm\]'"):
        make_backend(BackendSettings(kind="vllm", model=str(tiny_model)))


@pytest.mark.gpu
def test_vllm_generates_with_seeds_and_lora(tiny_model: Path, lora_adapter: Path) -> None:
    if not HAS_VLLM:
        pytest.skip("vLLM is not installed (optional extra 'vllm')")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    backend = make_backend(BackendSettings(kind="vllm", model=str(tiny_model), vllm_max_lora_rank=8,
                                           vllm_gpu_memory_utilization=0.3, vllm_max_model_len=2048))
    sampling = Sampling(temperature=0.8, top_p=0.95, max_tokens=16, seed=5)
    out = backend.generate(["class Model", "import torch"], sampling, n=3)
    assert [len(r) for r in out] == [3, 3]
    assert backend.generate(["class Model", "import torch"], sampling, n=3) == out
    tuned = backend.generate(["class Model"], sampling, n=1, adapter=AdapterRef.for_round(1, lora_adapter))
    assert len(tuned[0]) == 1
