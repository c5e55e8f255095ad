"""VerifierCore (ServiceCore) and the `kz verify` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic")

from kz_common.core import ProcessingError, ServiceCore  # noqa: E402
from schemas import Producer, make_event  # noqa: E402
from schemas.events import (ChallengeContext, ChallengeCreated, SolutionExtracted,  # noqa: E402
                            SolutionVerified, Target)
from services.verifier.cli import main  # noqa: E402
from services.verifier.options import VERIFIER_VERSION  # noqa: E402
from services.verifier.service import VerifierCore  # noqa: E402
from tests.services.verifier.conftest import CHEATS, CPU_OPTIONS, PROBLEMS, SOLUTIONS  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PRODUCER = Producer(service="extractor", version="1")


def _context(problem: str) -> ChallengeContext:
    challenge = ChallengeCreated(
        challenge_id="c-add", op="add", family="elementwise", dtype="float32",
        shape_range={"n": (77, 4099)}, target=Target(kind="naive_multiple", value=1.0),
        difficulty=0, generator="programmatic", round=0, problem_source=problem)
    return ChallengeContext.of(challenge)


def _extracted(code: str | None, reason: str | None = None,  # noqa: ANN202
               problem: str | None = None):
    ctx = _context(problem if problem is not None else (PROBLEMS / "add.py").read_text())
    payload = SolutionExtracted(challenge_id="c-add", context=ctx, sample_index=2,
                                accepted=code is not None, code=code,
                                code_hash="abc" if code else None, reason=reason)
    return make_event(payload, producer=PRODUCER, correlation_id="c-add")


def test_core_interface() -> None:
    core = VerifierCore(CPU_OPTIONS)
    assert isinstance(core, ServiceCore)
    assert core.name == "verifier" and core.version == VERIFIER_VERSION
    assert core.inputs == ("extracted",)


def test_rejected_extraction_is_accounted_for_without_running() -> None:
    [out] = VerifierCore(CPU_OPTIONS).process(_extracted(None, reason="no code block"))
    assert isinstance(out, SolutionVerified)
    assert not out.passed and out.stage == "extraction" and out.sample_index == 2
    assert "no code block" in out.reasons[0]


def test_accepted_extraction_is_verified_and_cheat_rejected() -> None:
    core = VerifierCore(CPU_OPTIONS)
    try:
        [ok] = core.process(_extracted((SOLUTIONS / "add_ok.py").read_text()))
        [bad] = core.process(_extracted((CHEATS / "library_call.py").read_text()))
    finally:
        core.close()
    assert ok.passed and ok.stage == "passed" and ok.code_hash == "abc"
    assert ok.context.op == "add" and ok.code and ok.triton_launches
    assert not bad.passed and bad.stage == "static"


def test_a_batch_is_verified_concurrently_in_one_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """workers=2: the runner's handle_many hands the batch to process_many, which verifies
    the accepted extractions in one verify_batch (bundles built ahead of the workers); the
    rest (a rejected extraction, a missing problem) are answered in place; outputs come back
    in input order, from one Session (one bundle for the shared problem)."""
    from dataclasses import replace

    from kz_common.processing import BatchProcessor, InRecord
    from schemas import decode, encode
    from services.verifier import service

    batches: list[int] = []

    def spy(session, items, workers):  # type: ignore[no-untyped-def]  # the real one, counted
        batches.append(len(items))
        return real(session, items, workers)

    real = service.verify_batch
    monkeypatch.setattr(service, "verify_batch", spy)
    core = VerifierCore(replace(CPU_OPTIONS, workers=2))
    assert core.concurrency == 2
    events = [_extracted((SOLUTIONS / "add_ok.py").read_text()),
              _extracted(None, reason="no code block"),
              _extracted("class ModelNew: pass", problem=" "),
              _extracted((CHEATS / "zeros_output.py").read_text())]
    recs = [InRecord("extracted", 0, i, encode(e)) for i, e in enumerate(events)]
    try:
        outs = BatchProcessor(core, max_bytes=4_000_000, capacity=10).handle_many(recs, 2)
        session = core._session
        assert session is not None and len(session._bundles) == 1
    finally:
        core.close()
    assert batches == [2]  # both accepted extractions in one verify_batch
    assert [o.topic for o in outs] == ["verified", "verified", "dead-letters", "verified"]
    ok, unextracted, _, bad = (decode(o.value).payload for o in outs)
    assert ok.passed and ok.stage == "passed" and not bad.passed
    assert unextracted.stage == "extraction" and not unextracted.passed
    with pytest.raises(ValueError, match="workers"):
        replace(CPU_OPTIONS, workers=0)


def test_missing_problem_source_is_a_processing_error() -> None:
    with pytest.raises(ProcessingError):
        VerifierCore(CPU_OPTIONS).process(_extracted("class ModelNew: pass", problem=" "))


def test_cli_json_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problem = str(PROBLEMS / "softmax.py")
    assert main([problem, str(CHEATS / "exec_eval.py"), "--json"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    verdict = json.loads(out[0])
    assert verdict["passed"] is False and verdict["stage"] == "static"
    assert {"reasons", "timings", "isolation", "speedup_vs_naive"} <= set(verdict)
    assert main([str(tmp_path / "missing.py"), str(CHEATS / "exec_eval.py")]) == 2
    broken = tmp_path / "broken.py"
    broken.write_text("class Model(:\n")
    assert main([str(broken), str(CHEATS / "exec_eval.py"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["stage"] == "misuse"
    assert main([problem]) == 2


def test_cli_module_end_to_end_pass_and_fake_verdict(tmp_path: Path) -> None:
    """`python -m services.verifier`: a candidate printing PASSED/JSON changes nothing."""
    def run(solution: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "services.verifier",
                               str(PROBLEMS / "softmax.py"), str(solution), "--json"],
                              capture_output=True, text=True, cwd=REPO, timeout=400)
    good, fake = run(SOLUTIONS / "softmax_ok.py"), run(CHEATS / "fake_verdict_stdout.py")
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout)["passed"] is True
    assert fake.returncode == 1
    [line] = fake.stdout.strip().splitlines()  # exactly one JSON object, ours
    assert json.loads(line)["passed"] is False
