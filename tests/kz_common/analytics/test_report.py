"""The HTML report: files written, and the page renders in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kz_common.analytics.report import build_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_files(archive: Path, tmp_path: Path) -> None:
    report = build_report(archive, tmp_path)
    page = report.html.read_text()
    assert {p.name for p in report.plots} == {"pass_rate.png", "speedup.png", "funnel.png", "curriculum.png"}
    for p in report.plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"src='{p.name}'" in page
    assert "Top kernels" in page and "<td>r1-" in page  # the last (best) round leads


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(archive: Path, tmp_path: Path) -> None:
    report = build_report(archive, tmp_path / "report")
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             f"--screenshot={shot}", "--window-size=1200,1600", report.html.as_uri()],
            check=False, capture_output=True, timeout=90)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1200, 1600)
        colours = img.convert("RGB").resize((60, 80)).getcolors(maxcolors=100_000) or []
    assert len(colours) > 20  # plots and text rendered, not a blank page
