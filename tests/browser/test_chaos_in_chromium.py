"""The browser SDK through the fault proxy: its connections cut at random byte offsets,
in both directions, at least 100 times in one conversation, and every sequenced message
still handled exactly once, in order, on both sides (§4.3, §5.4); every tool call run
at most once and answered exactly once (§7.2).

The page (Chromium, the SDK from the demo bundle) talks to an in-process server through
``tests/reliability/faultproxy.py``; the server's sessions record what they sent and
handled. ``VRT_BROWSER_CHAOS_ROUNDS`` changes the number of turns (default 320).
"""

from __future__ import annotations

import os
import random

from faultproxy import Direction, FaultPlan, FaultProxy, LinkFaults
from reliability_harness import LiveServer

from support.browser import run_scenario
from vrt.agents import ToolSettled
from vrt.demo import demo_files, start_page_server

ROUNDS = int(os.environ.get("VRT_BROWSER_CHAOS_ROUNDS", "320"))
CUTS = 150
MIN_CUTS = 100


def _plan(seed: int) -> FaultPlan:
    """Every one of the first CUTS links is cut once, in one direction or the other, at
    a log-uniform byte offset (counted from the link's first byte, so that some cuts
    land in the WebSocket upgrade or the hello, most in the conversation); some links
    are also split or delayed."""
    rng = random.Random(seed)
    links = []
    for _ in range(CUTS):
        direction: Direction = "s2c" if rng.random() < 0.6 else "c2s"
        low, high = (60, 20_000) if direction == "s2c" else (200, 3_000)
        offset = int(low * (high / low) ** rng.random())
        links.append(
            LinkFaults(
                split=rng.choice([0, 0, 2, 29]),
                delay_ms=rng.choice([0.0, 0.0, 2.0]),
                cut=(direction, offset),
            )
        )
    return FaultPlan(links)


async def test_browser_connections_cut_100_times_exactly_once_both_ways(live: LiveServer) -> None:
    seed = int(os.environ.get("VRT_CHAOS_SEED", "14"))
    proxy = FaultProxy(("127.0.0.1", live.port), _plan(seed), seed)
    url = await proxy.start()
    proxy.arm()
    try:
        httpd, page = start_page_server(demo_files(), "127.0.0.1", 0, url)
        try:
            result = await run_scenario("chaos", timeout=600, page=page, url=url, rounds=ROUNDS)
        finally:
            httpd.shutdown()
            httpd.server_close()
    finally:
        await proxy.close()
    report = f"seed {seed}; proxy log tail: {proxy.log[-10:]}"
    print(
        f"browser chaos: {proxy.fired['cut']} cuts, {result['stats']['connections']} "
        f"connections, {result['stats']['resumes']} resumes, {result['sentLast']} client and "
        f"{result['lastSeq']} server messages"
    )

    assert proxy.fired["cut"] >= MIN_CUTS, f"only {proxy.fired['cut']} cuts; {report}"
    events = result["events"]
    assert events["failed"] == [], report
    assert events["errors"] == [], report
    # Each cut costs a connection; most land in a session that then resumes.
    assert result["stats"]["connections"] > proxy.fired["cut"], report
    assert result["stats"]["resumes"] >= MIN_CUTS // 2, report

    record = live.record(result["sessionId"])
    # Client to server: seqs 1..M handled once each, in order: everything the page sent.
    assert [seq for seq, _ in record.handled] == list(range(1, result["sentLast"] + 1)), report
    # Server to client: the page handled exactly what the server sent, once, in order.
    sent = [(seq, message.TYPE) for seq, message in record.sent]
    handled = [tuple(entry) for entry in result["handled"]]
    assert handled == sent[: len(handled)], report
    assert len(handled) >= len(sent) - 2, report  # at most the final turn's tail unacknowledged

    # Every call ran once in the page and was settled once by its result, never TIMEOUT.
    runs = [run["callId"] for run in result["runs"]]
    assert len(runs) == len(set(runs)) == ROUNDS // 2, report
    settled = [e for e in live.agent(result["sessionId"]).inputs if isinstance(e, ToolSettled)]
    assert sorted(s.call_id for s in settled) == sorted(runs), report
    assert all(s.ok for s in settled), report
    # Every turn's reply arrived: each echo's words, and each call's result chunk.
    assert sum(text.startswith("round") for text in result["texts"]) == ROUNDS - ROUNDS // 2
