"""What the browser tests (tests/browser/) and bench/browser_latency.py share: the
Chromium driver (clients/web/test/browser/driver.mjs), WAV files for Chromium's fake
microphone, and the check that the browser toolchain is there.

The tests drive Debian's Chromium (``/usr/bin/chromium``, or ``VRT_CHROMIUM``) through
``playwright-core`` from npm; nothing is downloaded. ``.ci/run`` installs both. Outside
CI a machine without them skips these tests with the command that installs them; in CI
(``CI=true``) their absence fails the run.
"""

from __future__ import annotations

import array
import asyncio
import json
import math
import os
import shutil
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "clients" / "web"
DRIVER = WEB / "test" / "browser" / "driver.mjs"
CHROMIUM = os.environ.get("VRT_CHROMIUM", "/usr/bin/chromium")


def require_browser() -> None:
    """Skip (or, in CI, fail) unless node, the built package and Chromium are there."""
    missing = []
    if shutil.which("node") is None:
        missing.append("node (apt-get install nodejs npm)")
    if not (WEB / "node_modules" / "playwright-core").is_dir():
        missing.append("clients/web/node_modules (cd clients/web && npm ci)")
    if not (WEB / "dist" / "demo" / "demo.js").is_file():
        missing.append("clients/web/dist (cd clients/web && npm run build)")
    if not Path(CHROMIUM).exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    if missing:
        message = "the browser tests need " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class Driver:
    """One run of driver.mjs: a scenario in a fresh Chromium."""

    process: asyncio.subprocess.Process
    scenario: str

    @classmethod
    async def start(cls, scenario: str, **options: Any) -> Driver:
        process = await asyncio.create_subprocess_exec(
            "node",
            str(DRIVER),
            scenario,
            json.dumps(options),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process, scenario)

    async def line(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next JSON line the scenario prints."""
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not raw:
            raise AssertionError(
                f"{self.scenario}: the driver printed nothing\n{await self.stderr()}"
            )
        value: dict[str, Any] = json.loads(raw)
        return value

    def tell(self, word: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(word.encode() + b"\n")

    async def result(self, timeout: float = 90.0) -> dict[str, Any]:
        """The scenario's findings; fails with Chromium's log if it failed."""
        value = await self.line(timeout)
        status = await asyncio.wait_for(self.process.wait(), 30)
        if status != 0:
            raise AssertionError(f"{self.scenario} failed ({status})\n{await self.stderr()}")
        return value

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        return (await self.process.stderr.read()).decode(errors="replace")[-6000:]

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


async def run_scenario(scenario: str, timeout: float = 90.0, **options: Any) -> dict[str, Any]:
    driver = await Driver.start(scenario, **options)
    try:
        return await driver.result(timeout)
    finally:
        await driver.close()


def write_wav(path: Path, segments: list[tuple[float, float]], rate: int = 48000) -> Path:
    """A mono 16-bit WAV: each segment is (milliseconds, amplitude) of a 440 Hz tone
    (amplitude 0 is silence)."""
    samples = array.array("h")
    t = 0
    for ms, amplitude in segments:
        count = round(rate * ms / 1000)
        samples.extend(
            round(amplitude * 32767 * math.sin(2 * math.pi * 440 * (t + i) / rate))
            for i in range(count)
        )
        t += count
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path
