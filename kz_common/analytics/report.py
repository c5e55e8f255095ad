"""`kz report`: a static HTML page (plus PNG plots) of the flywheel, built from the archive."""

from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kz_common.analytics.cache import open_cached
from kz_common.analytics.exceptions import AnalyticsError
from kz_common.analytics.queries import query


@dataclass(frozen=True)
class Report:
    html: Path
    plots: list[Path]


def build_report(root: Path, out_dir: Path) -> Report:
    """Write out_dir/report.html and its PNGs from the archive at `root`."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on servers or in tests
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    con = open_cached(root)  # many queries: native tables, JSON parsed once per new file
    try:
        data = {name: query(con, name) for name in
                ("pass_rate", "speedups", "funnel", "curriculum", "top_kernels", "curation_rates")}
    finally:
        con.close()
    plots = [p for p in (_plot_pass_rate(data["pass_rate"], out_dir), _plot_speedup(data["speedups"], out_dir),
                         _plot_funnel(data["funnel"], out_dir), _plot_curriculum(data["curriculum"], out_dir))
             if p is not None]
    page = out_dir / "report.html"
    try:
        page.write_text(_page(data, plots), encoding="utf-8")
    except OSError as exc:
        raise AnalyticsError(f"cannot write {page}: {exc}") from exc
    return Report(page, plots)


Result = tuple[list[str], list[tuple[Any, ...]]]


def _series(result: Result, x: str, y: str, by: str) -> dict[str, tuple[list[Any], list[Any]]]:
    names, rows = result
    ix, iy, ib = names.index(x), names.index(y), names.index(by)
    out: dict[str, tuple[list[Any], list[Any]]] = defaultdict(lambda: ([], []))
    for r in rows:
        if r[ix] is not None and r[iy] is not None:
            out[str(r[ib])][0].append(r[ix])
            out[str(r[ib])][1].append(r[iy])
    return out


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _plot_lines(series: dict[str, tuple[list[Any], list[Any]]], title: str, ylabel: str, path: Path,
                step: bool = False) -> Path | None:
    import matplotlib.pyplot as plt

    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, (xs, ys) in sorted(series.items()):
        (ax.step(xs, ys, where="post", label=label) if step else ax.plot(xs, ys, marker="o", label=label))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds and decisions are whole numbers
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    return _save(fig, path)


def _plot_pass_rate(result: Result, out: Path) -> Path | None:
    return _plot_lines(_series(result, "round", "pass_rate", "family"), "pass rate per round", "pass rate",
                       out / "pass_rate.png")


def _plot_speedup(result: Result, out: Path) -> Path | None:
    return _plot_lines(_series(result, "round", "p50", "op"), "median speedup vs naive, per round",
                       "speedup (x)", out / "speedup.png")


def _plot_curriculum(result: Result, out: Path) -> Path | None:
    names, rows = result
    per: dict[str, tuple[list[Any], list[Any]]] = defaultdict(lambda: ([], []))
    for r in rows:  # ordered by family, time: x is the decision number of that family
        xs, ys = per[r[names.index("family")]]
        xs.append(len(xs))
        ys.append(r[names.index("new_difficulty")])
    return _plot_lines(per, "curriculum band (difficulty per family)", "difficulty", out / "curriculum.png",
                       step=True)


def _plot_funnel(result: Result, out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    names, rows = result
    if not rows:
        return None
    stages = ["generated", "extracted", "verified", "curated"]
    totals = [sum(r[names.index(s)] or 0 for r in rows) for s in stages]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    bars = ax.barh(stages[::-1], totals[::-1], color="#4c72b0")
    ax.bar_label(bars, padding=3)
    ax.set_title("dedup funnel (all rounds)")
    return _save(fig, out / "funnel.png")


def _table(result: Result, limit: int = 50) -> str:
    names, rows = result
    if not rows:
        return "<p class='empty'>no data yet</p>"
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>"
                   for r in rows[:limit])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3g}"
    text = str(v)
    return text if len(text) <= 24 else text[:23] + "…"


CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{margin-bottom:0}.sub{color:#666}img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;
padding:3px 8px;text-align:right}th{background:#f3f3f3}.empty{color:#999}"""


def _page(data: dict[str, Result], plots: list[Path]) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    imgs = "".join(f"<img alt='{p.stem}' src='{p.name}'>" for p in plots)
    sections = [("Pass rate per round and family", "pass_rate"), ("Dedup funnel", "funnel"),
                ("Curation: dedup and rule hit rates", "curation_rates"),
                ("Speedup distribution", "speedups"), ("Top kernels", "top_kernels"),
                ("Curriculum trajectory", "curriculum")]
    body = "".join(f"<h2>{html.escape(t)}</h2>{_table(data[k])}" for t, k in sections)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>KernelZero flywheel report</title>"
            f"<style>{CSS}</style></head><body><h1 id='title'>KernelZero flywheel report</h1>"
            f"<p class='sub'>built {now} from the event archive</p>{imgs}{body}</body></html>")
