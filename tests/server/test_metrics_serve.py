"""``vrt serve --metrics``: the per-response metrics carry the name ``--agent`` gave the
agent (docs/operations.md#per-response-metrics)."""

from __future__ import annotations

import json
import subprocess

import httpx
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from support.processes import free_port, stop, vrt_command


def test_the_response_metrics_are_labelled_with_the_agents_name() -> None:
    port, metrics_port = free_port(), free_port()
    command = [*vrt_command(), "serve", "--port", str(port), "--agent", "scripted"]
    process = subprocess.Popen(
        [*command, "--metrics", f"127.0.0.1:{metrics_port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
        with connect(f"ws://127.0.0.1:{port}") as ws:
            ws.send('{"v":1,"seq":0,"type":"hello"}')
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
            ws.send('{"v":1,"seq":1,"type":"text","text":"echo hi"}')
            while True:
                frame = ws.recv(timeout=10)
                if isinstance(frame, str) and json.loads(frame).get("state") == "idle":
                    break
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    finally:
        stop(process)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    completed = (("agent", "scripted"), ("outcome", "completed"))
    assert samples[("vrt_response_duration_seconds_count", completed)] == 1
    first_audio = ("vrt_response_time_to_first_audio_seconds_count", (("agent", "scripted"),))
    assert samples[first_audio] == 1
