"""``kill -9`` of the process that owns a session, mid-turn, at random points: the client
resumes on another process (through HAProxy), every sequenced message is delivered
exactly once in both directions, the turn in flight ends as specified (``interrupted``,
``turn.state idle``, ``TURN_CUT_SHORT``), no tool of its epoch ever starts, and the
conversation goes on with its history (``checks.py``).

``VRT_KILL_RUNS`` runs (100 by default); each kills the owner of a new session at a
random moment of a random reply (a tool call, several calls, a server tool, speech, a
burst of text) and restarts it in the background for a later run. The precise moment
"after the store write, before the socket write" is taken in-process by
``test_window.py``.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections import Counter
from typing import Final

import pytest
from checks import check_conversation, store_settled
from fleet import Fleet
from reliability_harness import Recorder, ToolKit, eventually, instrument_client

from conftest import StoreView
from vrt.client import TextReceived, VrtClient

RUNS: Final = int(os.environ.get("VRT_KILL_RUNS", "100"))
#: Against the Redis Cluster (the same code path but for where keys live).
CLUSTER_RUNS: Final = int(os.environ.get("VRT_KILL_CLUSTER_RUNS", "20"))
COMMANDS: Final = (
    'call add {"a": 2, "b": 3}',
    'calls 3 slow {"ms": 40}',
    "server-tool 300",
    "speak 400",
    "burst 200",
    "echo a b c d e f g",
)


async def kill_run(seed: int, fleet: Fleet, view: StoreView, call_ids: Counter[str]) -> str:
    rng = random.Random(seed)
    kit = ToolKit()
    client = VrtClient(
        fleet.url,
        tools=kit.tools,
        capabilities=["tool-stream-v1"] if rng.random() < 0.5 else [],
        ping_interval=0.5,
        backoff_initial=0.01,
        backoff_max=0.1,
        open_timeout=2.0,
    )
    kit.closed_epoch = lambda: client.core.closed_epoch
    record = instrument_client(client)
    recorder = Recorder(client)
    recorder.start()
    texts: list[str] = []
    try:
        await client.connect()
        session_id = client.session_id
        assert session_id is not None
        command = rng.choice(COMMANDS)
        for text in ("echo before", command):
            await client.send_text(text)
            texts.append(text)
        await asyncio.sleep(rng.uniform(0.0, 0.25))
        owner = view.owner(session_id).partition(":")[0]
        victim = next(server for server in fleet.servers if server.worker == owner)
        victim.kill()
        restart = threading.Thread(target=victim.restart)
        restart.start()
        await eventually(lambda: store_settled(client, view), "the session to settle", 10.0)
        await client.send_text("history?")
        texts.append("history?")
        await eventually(lambda: store_settled(client, view), "the history reply", 10.0)
        replies = [e.text for e in recorder.of(TextReceived)]
        assert replies, "no reply at all"
        codes = check_conversation(client, record, recorder, kit, view, texts, call_ids)
        await asyncio.to_thread(restart.join)
        return f"{command}: {dict(codes) or 'completed'}"
    except Exception as exc:
        raise AssertionError(
            f"kill run {seed} failed; VRT_KILL_SEED={seed} replays it: {exc}"
        ) from exc
    finally:
        await client.close()
        await recorder.stop()


@pytest.mark.timeout(900)
async def test_kill_9_of_the_owner_mid_turn(fleet: Fleet, store_view: StoreView) -> None:
    one = os.environ.get("VRT_KILL_SEED")
    runs = CLUSTER_RUNS if store_view.cluster else RUNS
    seeds = [int(one)] if one is not None else list(range(runs))
    call_ids: Counter[str] = Counter()
    outcomes = Counter([await kill_run(seed, fleet, store_view, call_ids) for seed in seeds])
    print(f"\nkill -9: {len(seeds)} runs; {dict(outcomes)}")
    if one is None and runs >= 20:
        # The random points do land mid-turn: turns were cut short.
        assert any("TURN_CUT_SHORT" in outcome for outcome in outcomes), outcomes
