"""report.html in headless Chromium: it loads, the slider moves over every tick, a
screenshot renders, and nothing errors in the console. Skipped where Chromium is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from blockplan.config import PlannerConfig
from blockplan.replay import run_replay
from blockplan.runtime import ConstantVelocityPlanner
from tests.replay.bagmaker import BagSpec, make_bag

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")


def _chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line]


def test_console_errors_are_detected(tmp_path: Path) -> None:
    """The check below would see a script error (guards against a silent browser)."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>null.x = 1;</script></body></html>")
    proc = _chromium("--dump-dom", page.as_uri())
    assert any("Uncaught" in line for line in _console(proc.stderr)), proc.stderr[-2000:]


@pytest.mark.slow
def test_report_in_headless_chromium(tmp_path: Path) -> None:
    spec = BagSpec(duration_s=7.0, silent_camera="rear", silent_after_s=4.0)
    bag = make_bag(tmp_path / "in.mcap", spec)
    outputs = run_replay(bag, tmp_path / "out", ConstantVelocityPlanner(), PlannerConfig())
    num_ticks = outputs.metrics["ticks"]
    proc = _chromium("--dump-dom", outputs.report_html.as_uri() + "#selftest")
    assert f"<title>selftest ok {num_ticks}</title>" in proc.stdout, proc.stderr[-2000:]
    console = _console(proc.stderr)
    assert console and all("selftest ok" in line for line in console), console
    shot = tmp_path / "report.png"
    proc = _chromium(
        "--hide-scrollbars",
        "--window-size=1300,1400",
        f"--screenshot={shot}",
        outputs.report_html.as_uri() + "#t=50",
    )
    assert shot.is_file() and shot.stat().st_size > 20_000, proc.stderr[-2000:]
    assert all("Uncaught" not in line for line in _console(proc.stderr))
