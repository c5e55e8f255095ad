"""One full flywheel round for real, the verifier on `--device`: issue 7's GPU round.

    python benchmarks/flywheel_gpu.py --device cuda --out DIR [--challenges 4] [--timeout 300]

What runs (kz_common.flywheel.running_services, the machinery of `kz run`): the embedded
Tansu broker and every service as its own `python -m kz_common.cli service NAME` process,
plus the archiver. The solver samples the locally built tiny model (random weights): its
samples are rejected at extraction, as expected. So that the verifier sees real kernels,
this script also publishes, for every challenge of the round, the catalogue's hand-written
reference kernel (kz_common.kernels) as a `solution.sampled` event of its own challenge id
`<id>-ref` with backend "reference-injection", and known cheats from
tests/services/verifier/cheats (backend "cheat-injection", model_id "cheat:<name>") on a
softmax challenge drawn by the challenger's own generator; the cheats must end rejected.
Injected samples enter one hop after the LLM and go through extractor -> verifier ->
curator like any sample. The curator's window is sized to close on the round's last verdict,
and its threshold to request training on what it keeps, so the trainer runs one LoRA round
on the tiny model (on the GPU when there is one) and the evaluator decides it.

Follows the log until every sample of the round has a curation decision or a dead letter
and the training round is decided, or `--timeout` passes. Prints tables and writes
DIR/flywheel_round.json, rewritten as events arrive, so a killed run keeps partial results
(plus DIR/flywheel_round.txt, the printed tables, and DIR/logs/, the tail of every service's log).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from flywheel_report import origin, phases, render, summarise
from rich.console import Console

from kz_common.config import KafkaConfig, PathsConfig, Settings
from kz_common.flywheel import Fleet, publish_events, publish_round, running_services
from kz_common.kernels import reference_solution
from kz_common.watch import RoundLedger, Watcher
from schemas import (
    AnyEnvelope,
    ChallengeContext,
    ChallengeCreated,
    Producer,
    RoundStarted,
    Sampling,
    SolutionSampled,
    make_event,
)

CHEATS_DIR = ROOT / "tests" / "services" / "verifier" / "cheats"
DEFAULT_CHEATS = ("library_call", "input_mutation")  # rejected statically / at run time
N_SAMPLES = 2  # solver samples per challenge
ORIGIN = Producer(service="flywheel-bench", version="1")
NO_SAMPLING = Sampling(temperature=0.0, top_p=1.0, max_tokens=1, seed=0)  # nothing was sampled


class Report:
    """The JSON report, rewritten (atomically) whenever something is added."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path, self.t0 = path, t0
        self.data: dict[str, Any] = {"benchmark": "flywheel_gpu", "wall_marks_s": {"start": 0.0}}

    def mark(self, name: str) -> None:
        self.data["wall_marks_s"][name] = time.time() - self.t0
        self.write()

    def write(self) -> None:
        self.data["phases"] = phases(self.data["wall_marks_s"], self.data.get("summary", {}).get(
            "event_times_s", {}))
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        tmp.replace(self.path)


class RoundWatcher(Watcher):
    """kz run's Watcher, also keeping every envelope and accounting injected challenges."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.docs: list[tuple[str, dict[str, Any]]] = []
        super().__init__(settings.kafka, bootstrap)

    def _ingest(self, topic: str, value: bytes) -> None:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("payload"), dict) and isinstance(doc.get("type"), str):
            self.docs.append((topic, doc))
        super()._ingest(topic, value)

    def track(self, challenge_id: str, r: int) -> None:
        """Account an injected challenge (no challenge.created of its own) to round `r`."""
        self.rounds_of[challenge_id] = r
        self.tally.setdefault(r, RoundLedger(r))

    def challenges(self, r: int) -> list[ChallengeCreated]:
        return [ChallengeCreated.model_validate(d["payload"]) for _, d in self.docs
                if d["type"] == "challenge.created" and d["payload"]["round"] == r
                and d["payload"].get("purpose", "train") == "train"]

    def round_ids(self, r: int) -> set[str]:
        return {c for c, rr in self.rounds_of.items() if rr == r}


# ------------------------------------------------------------------ environment and settings


def fingerprint(device: str) -> dict[str, Any]:
    import torch
    import transformers
    import triton

    env: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
        "torch": torch.__version__, "cuda_runtime": torch.version.cuda, "triton": triton.__version__,
        "transformers": transformers.__version__, "cuda_available": torch.cuda.is_available(),
        "git_commit": _git("rev-parse", "HEAD"), "git_dirty": bool(_git("status", "--porcelain")),
    }
    try:
        import peft

        env["peft"] = peft.__version__
    except ImportError:
        env["peft"] = "missing"
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             check=False, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        if out:
            name, driver, memory = (x.strip() for x in out[0].split(","))
            env.update({"gpu": name, "driver": driver, "gpu_memory": memory, "gpus": len(out)})
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch sees no CUDA device")
    return env


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, check=False, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def window_size(challenges: int, cheats: int) -> int:
    """Train verdicts of the round: every solver sample, one reference per challenge, the cheats."""
    return challenges * (N_SAMPLES + 1) + cheats


def build_settings(args: argparse.Namespace, data: Path, model: str) -> Settings:
    import torch

    cpu = args.device == "cpu"
    llm_device = "cuda" if args.device == "cuda" and torch.cuda.is_available() else "cpu"
    services: dict[str, dict[str, Any]] = {
        "challenger": {"cpu_mode": cpu, "device": args.device},
        # Short noise: the tiny model's samples are rejected at extraction whatever their length.
        "solver": {"model": model, "device": llm_device, "n_samples": N_SAMPLES, "max_tokens": 256,
                   "few_shot": 1},
        "verifier": {"device": args.device},
        # One window = this round's train verdicts; keep every clean unique answer; train on them.
        "curator": {"require_perf": not cpu, "window_verdicts": window_size(args.challenges, len(args.cheats)),
                    "keep_fraction": 1.0, "train_threshold": 1},
        "trainer": {"base_model": model, "few_shot": 1, "eval_ops_per_type": 1,
                    "eval_shape_source": "cpu" if cpu else "default",
                    "train": {"device": llm_device, "epochs": 2, "batch_size": 2}},
        "evaluator": {"min_samples": 2},
    }
    return Settings(kafka=KafkaConfig(embedded_port=free_port()), paths=PathsConfig(data_dir=data), services=services)


# ------------------------------------------------------------------ injected samples


def injected_sample(ctx: ChallengeContext, challenge_id: str, code: str, backend: str,
                    model_id: str) -> AnyEnvelope:
    """A solution.sampled carrying `code` in a fenced block, labelled as not sampled by an LLM."""
    payload = SolutionSampled(
        challenge_id=challenge_id, context=ctx, sample_index=0, n_samples=1, backend=backend,
        model_id=model_id, adapter=None, adapter_round=None, sampling=NO_SAMPLING, prompt_hash="",
        raw_output=f"```python\n{code}\n```\n")
    return make_event(payload, producer=ORIGIN, correlation_id=challenge_id)


def cheat_source(name: str) -> tuple[str, dict[str, Any]]:
    """Source of cheat `name` and its CHEAT metadata (read, never imported)."""
    src = (CHEATS_DIR / f"{name}.py").read_text()
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CHEAT" for t in node.targets):
            return src, ast.literal_eval(node.value)
    return src, {}


def cheat_context(settings: Settings, r: int) -> ChallengeContext:
    """A softmax train challenge of round `r`, drawn by the challenger's own generator."""
    from services.challenger.config import ChallengerConfig
    from services.challenger.core import ChallengerCore

    section = {**settings.services["challenger"], "ops": ["softmax"], "dtypes": ["float32"]}
    core = ChallengerCore(ChallengerConfig.model_validate(section))
    [challenge] = core.new_round(RoundStarted(round=r, n_challenges=1, seed=10_000 + r))
    return ChallengeContext.of(challenge)


def injections(settings: Settings, r: int, challenges: list[ChallengeCreated], cheats: list[str],
               window: int) -> list[AnyEnvelope]:
    """References for every challenge (more, cycling, if the round came up short), then cheats."""
    missing = window - window_size(len(challenges), len(cheats))
    targets = [(c, "ref") for c in challenges]
    targets += [(challenges[i % len(challenges)], f"ref{2 + i // len(challenges)}") for i in range(missing)]
    out = [injected_sample(ChallengeContext.of(c), f"{c.challenge_id}-{tag}", reference_solution(c.op),
                           "reference-injection", f"kz_common.kernels:{c.op}") for c, tag in targets]
    ctx = cheat_context(settings, r)
    for name in cheats:
        src, _meta = cheat_source(name)
        out.append(injected_sample(ctx, f"r{r}-cheat-{name}", src, "cheat-injection", f"cheat:{name}"))
    return out


# ------------------------------------------------------------------ the round


def follow(watcher: RoundWatcher, fleet: Fleet, settings: Settings, args: argparse.Namespace,
           report: Report, console: Console) -> None:
    """Publish the round, inject once its challenges are out, and follow it to the decision."""
    r = watcher.next_round()
    publish_round(settings, fleet.bootstrap, r, args.challenges, seed=args.seed)
    report.mark("round_published")
    deadline = time.monotonic() + args.timeout
    injected_at: float | None = None
    complete_at: float | None = None
    last_write = 0.0
    while True:
        watcher.poll(0.5)
        fleet.check_alive()
        challenges = watcher.challenges(r)
        settled = challenges and time.monotonic() - watcher.last_challenge_at.get(r, 0.0) > 3.0
        if injected_at is None and (len(challenges) >= args.challenges or settled):
            events = injections(settings, r, challenges, args.cheats,
                                settings.services["curator"]["window_verdicts"])
            for e in events:
                watcher.track(e.payload.challenge_id, r)
            publish_events(settings, fleet.bootstrap, "solutions", events)
            injected_at = time.monotonic()
            report.data["injected"] = [{"challenge_id": e.payload.challenge_id, "origin": origin(
                e.payload.model_dump()), "model_id": e.payload.model_id} for e in events]
            report.data["cheat_expectations"] = {n: cheat_source(n)[1] for n in args.cheats}
            report.mark("injected")
            console.print(f"round {r}: {len(challenges)} challenges; injected {len(events)} samples")
        ledger = watcher.ledger(r)
        summary = summarise(watcher.docs, watcher.round_ids(r), report.t0)
        training = summary["training"]
        if ledger.complete() and injected_at is not None and complete_at is None:
            complete_at = time.monotonic()
            report.mark("round_accounted")
            console.print(f"round {r} accounted for: {ledger.describe()}")
        if time.monotonic() - last_write > 2.0 or training["evaluated"]:
            report.data["summary"], report.data["ledger"] = summary, ledger.describe()
            report.write()
            last_write = time.monotonic()
        if complete_at is not None and training["evaluated"]:
            return
        if complete_at is not None and not training["requested"] and time.monotonic() - complete_at > 30:
            raise TimeoutError("round accounted for, but no training request within 30 s")
        if time.monotonic() > deadline:
            raise TimeoutError(f"not finished after {args.timeout:.0f} s: {ledger.describe()}; "
                               f"training {training}")


def copy_logs(logs: Path, out: Path, keep_bytes: int = 200_000) -> None:
    """The services' logs (each cut to its last `keep_bytes`) next to the report."""
    (out / "logs").mkdir(exist_ok=True)
    for log in sorted(logs.glob("*.log")):
        data = log.read_bytes()
        (out / "logs" / log.name).write_bytes(data[-keep_bytes:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda", help="the verifier's device")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--challenges", type=int, default=4)
    # The challenger's round seed. 8 draws rmsnorm, gelu, add and matmul: four families, one of
    # them compute-bound (seed 0, what `kz run` uses for round 0, draws four matmuls).
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--cheats", type=lambda s: [c for c in s.split(",") if c], default=list(DEFAULT_CHEATS))
    ap.add_argument("--timeout", type=float, default=280.0, help="seconds from round start to its decision")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="working data: model, caches, adapters, archive (default: a temp dir, removed after)")
    args = ap.parse_args(argv)
    t0 = time.time()
    console = Console(width=180, record=True)
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out / "flywheel_round.json", t0)
    # The sandboxed verifier reads its cache under the data dir: world-traversable, unlike mkdtemp.
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="kz-flywheel-"))
    data.mkdir(parents=True, exist_ok=True)
    os.chmod(data, 0o755)
    # Services are `python -m kz_common.cli` children: make the source tree importable wherever.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout kill still stops the services
    status = 1
    try:
        report.data["config"] = {**{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                 "n_samples": N_SAMPLES, "data_dir": str(data)}
        report.data["environment"] = fingerprint(args.device)
        report.write()
        from kz_common.llm.defaults import resolve_model

        model = resolve_model("", Settings(paths=PathsConfig(data_dir=data)))
        report.mark("model_built")
        settings = build_settings(args, data, model)
        report.data["services_config"] = settings.services
        with running_services(settings, console) as fleet:
            report.mark("services_started")
            watcher = RoundWatcher(settings, fleet.bootstrap)
            follow(watcher, fleet, settings, args, report, console)
        status = 0
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded, then reported below
        report.data["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        report.mark("end")
        if (data / "logs").is_dir():
            copy_logs(data / "logs", args.out)
        if args.data_dir is None:
            shutil.rmtree(data, ignore_errors=True)
        render(report.data, console)
        console.print(f"report: {report.path}")
        console.save_text(str(args.out / "flywheel_round.txt"))
    return status


if __name__ == "__main__":
    sys.exit(main())
