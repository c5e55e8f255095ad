"""Export round trip through Hugging Face datasets (JSONL and Parquet)."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas import PreferenceRecorded
from services.trainer.exceptions import ExportError
from services.trainer.export import export_dataset
from services.trainer.prompt import build_prompt, format_completion
from tests.services.curator.samples import CLEAN, context
from tests.services.trainer.events import curated, env


def pair(i: int) -> PreferenceRecorded:
    return PreferenceRecorded(
        challenge_id=f"c{i}", context=context(), chosen_sample_id=f"a{i}", rejected_sample_id=f"b{i}",
        chosen_code=CLEAN, rejected_code="bad", chosen_score=1.5, rejected_score=None, reason="failed:x",
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip_with_datasets(fmt: str, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    samples = [env(curated("s1")), curated("s2"), curated("s1"), curated("x", kept=False)]
    paths = export_dataset(samples, [pair(1), env(pair(2)), pair(1)], tmp_path, fmt=fmt)  # type: ignore[arg-type]
    kind = "json" if fmt == "jsonl" else "parquet"
    sft = datasets.load_dataset(kind, data_files=str(paths["sft"]), split="train")
    prefs = datasets.load_dataset(kind, data_files=str(paths["preferences"]), split="train")
    assert sft.num_rows == 2 and prefs.num_rows == 2  # kept only, duplicates once
    row = sft[0]
    assert row["prompt"] == build_prompt(context(), "c-s1") and row["completion"] == format_completion(CLEAN)
    assert row["metadata"]["sample_id"] == "s1" and row["metadata"]["family"] == "softmax"
    assert prefs[0]["rejected"] == format_completion("bad") and prefs[0]["metadata"]["rejected_score"] is None


def test_empty_parquet_keeps_columns(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    paths = export_dataset([], [], tmp_path, fmt="parquet")
    assert pq.read_table(paths["sft"]).column_names == ["prompt", "completion", "metadata"]


def test_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ExportError):
        export_dataset([], [], tmp_path, fmt="csv")  # type: ignore[arg-type]
