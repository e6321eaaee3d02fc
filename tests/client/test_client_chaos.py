"""Chaos: conversations with tool calls, interrupts and audio through a proxy that cuts
the connection at random moments, checking the client's guarantees after each one.

* "each sequenced message is handled exactly once" (§5.4): every tool runs at most
  once;
* "A client MUST answer every tool.call with exactly one tool.result" (§7.2): checked
  on the wire (one distinct ``seq`` per callId) and on the server (each call settled
  once, never by TIMEOUT);
* "A client MUST NOT play output audio of a closed epoch" (§6.2): no AudioChunk of a
  closed epoch reaches the application.

``VRT_CHAOS_RUNS`` sets the number of seeded runs (200 by default); a failure names
its seed, and ``VRT_CHAOS_SEED=N`` replays that one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from vrt.client import (
    AudioChunk,
    AudioStarted,
    ErrorReceived,
    InterruptedEpoch,
    SessionFailed,
    VrtClient,
)
from vrt.protocol.server import ServerConfig, ServerSession

if TYPE_CHECKING:
    from conftest import (
        Action,
        ClientFactory,
        Eventually,
        Frame,
        Link,
        LiveServer,
        Proxy,
        ProxyFactory,
        Recorder,
        ServerFactory,
        ToolKit,
    )

RUNS = int(os.environ.get("VRT_CHAOS_RUNS", "200"))
SEED = os.environ.get("VRT_CHAOS_SEED")
#: Connection cuts per run, at most.
MAX_CUTS = 3
#: Chance that a frame passing the proxy is the moment of a cut.
CUT_CHANCE = 0.03
#: A run that has not settled by then has hung.
RUN_TIMEOUT = 10.0


class ChaosHook:
    """Cuts the connection at random frames (forwarding or losing the frame)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.enabled = False
        self.cuts = 0

    def __call__(self, frame: Frame, link: Link) -> Action:
        del frame, link
        if not self.enabled or self.cuts >= MAX_CUTS or self.rng.random() >= CUT_CHANCE:
            return "forward"
        self.cuts += 1
        return "forward+cut" if self.rng.random() < 0.5 else "drop+cut"


def command(rng: random.Random) -> str:
    kind = rng.choice(["echo", "speak", "burst", "call", "calls", "call", "calls"])
    if kind == "call":
        arguments = {"a": rng.randint(0, 9), "b": rng.randint(0, 9)}
        return f"call add {json.dumps(arguments)}"
    if kind == "calls":
        return f'calls {rng.randint(1, 3)} slow {{"ms": {rng.randint(1, 8)}}}'
    if kind == "speak":
        return f"speak {rng.choice([20, 40, 60])}"
    if kind == "burst":
        return f"burst {rng.randint(1, 20)}"
    return "echo " + " ".join(rng.choice(["red", "green", "blue"]) for _ in range(3))


class Run:
    """One seeded conversation."""

    def __init__(
        self,
        seed: int,
        server: LiveServer,
        proxy: Proxy,
        client: VrtClient,
        recorder: Recorder,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.server = server
        self.proxy = proxy
        self.client = client
        self.recorder = recorder
        self.kit = kit
        self.until = until
        self.hook = ChaosHook(random.Random(seed ^ 0x5EED))
        proxy.hook = self.hook
        self.texts = 0

    def session(self) -> ServerSession:
        session = self.server.server.session(self.client.session_id or "")
        assert session is not None, "the session is gone"
        return session

    async def send(self, text: str) -> None:
        await self.client.send_text(text)
        self.texts += 1

    async def settled(self) -> None:
        """Wait until the server handled every text, its reply is over and each side
        handled everything the other sent."""
        agent = self.server.agent(self.client.session_id)
        client = self.client

        def quiet() -> bool:
            session = self.session()
            return (
                len(agent.texts) == self.texts
                and session.record.turn is None
                and not session.record.calls
                and session.incoming.last_seq == client.core.outgoing.last_seq
                and client.core.incoming.last_seq == session.outgoing.last_seq
                and self.kit.active == 0
            )

        await self.until(quiet, "the conversation to settle")

    async def play(self) -> None:
        await self.client.connect()
        self.hook.enabled = True
        for _ in range(self.rng.randint(3, 5)):
            await self.send(command(self.rng))
            then = self.rng.random()
            if then < 0.4:
                await self.settled()
            elif then < 0.75:
                await asyncio.sleep(self.rng.uniform(0, 0.03))
                await self.client.interrupt(self.rng.choice(["user", "keyboard", "speech"]))
            else:
                await asyncio.sleep(self.rng.uniform(0, 0.02))  # the next text barges in
        self.hook.enabled = False
        await self.send("echo end")
        await self.settled()

    def check(self) -> None:
        # Each tool ran at most once.
        runs = self.kit.runs
        assert not runs or max(runs.values()) == 1, f"a tool ran twice: {runs}"
        # Every call has exactly one result, on the wire and on the server.
        calls = self.proxy.tool_calls()
        results = self.proxy.tool_results()
        assert sorted(results) == sorted(calls), "a call without a result, or vice versa"
        doubled = {c: r for c, r in results.items() if len(r) != 1}
        assert not doubled, f"calls answered more than once: {doubled}"
        settled = self.server.agent(self.client.session_id).settled
        assert Counter(s.call_id for s in settled) == Counter(calls)
        assert not [s for s in settled if s.code == "TIMEOUT"], "a call went unanswered"
        # No audio of a closed epoch reached the application, in event order.
        closed = -1
        epochs: dict[str, int] = {}
        for event in self.recorder.events:
            if isinstance(event, InterruptedEpoch):
                closed = max(closed, event.epoch)
            elif isinstance(event, AudioStarted):
                epochs[event.item_id] = event.epoch
            elif isinstance(event, AudioChunk):
                assert event.item_id in epochs, "audio of an item never announced"
                assert epochs[event.item_id] > closed, "audio of a closed epoch"
        assert not self.recorder.of(SessionFailed)
        assert not self.recorder.of(ErrorReceived)


async def test_chaos_random_cuts(
    make_server: ServerFactory,
    make_proxy: ProxyFactory,
    make_client: ClientFactory,
    make_kit: Callable[[], ToolKit],
    until: Eventually,
) -> None:
    """§5.4, §6.2, §7.2 under random connection cuts (see the module docstring)."""
    server = await make_server(config=ServerConfig(tool_timeout=5.0), resume_window=10.0)
    seeds = [int(SEED)] if SEED else list(range(RUNS))
    cuts = 0
    for seed in seeds:
        proxy = await make_proxy(server.url)
        kit = make_kit()
        rng = random.Random(seed)
        capabilities = ["tool-stream-v1"] if rng.random() < 0.5 else []
        client, recorder = make_client(proxy.url, tools=kit.tools, capabilities=capabilities)
        run = Run(seed, server, proxy, client, recorder, kit, until)
        try:
            await asyncio.wait_for(run.play(), RUN_TIMEOUT)
            run.check()
        except (AssertionError, TimeoutError) as exc:
            raise AssertionError(
                f"chaos run {seed} failed; replay it with VRT_CHAOS_SEED={seed}: {exc!r}"
            ) from exc
        finally:
            await client.close()
            await recorder.stop()
            await proxy.close()
        cuts += run.hook.cuts
    assert cuts > 0 or len(seeds) < 10  # the runs did exercise resumes
