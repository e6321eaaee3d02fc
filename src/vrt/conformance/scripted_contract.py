"""Driving the server's agent by the scripted agent contract, and reading its replies.

The contract (conformance/README.md, "The scripted agent contract") says what a command
does on the wire; the helpers here send the commands and read their replies exactly as
the contract words them, and no more strictly: a reply is the concatenation of its
turn's text chunks, its lines are separated by ``\\n``, and the JSON in a reply is
compared parsed (any spacing, any key order).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from .framework import CheckFailed
from .server_context import REPLY, ServerContext
from .wire import Incoming
from .wire_session import Session, Turn

__all__ = [
    "ResultLine",
    "answer",
    "answered_call",
    "call",
    "context_reply",
    "interrupt",
    "interrupted_call",
    "results",
    "speaking",
]

_OK: Final = "result ok "
_ERROR: Final = "result error "


async def call(session: Session, command: str, count: int = 1) -> list[Incoming]:
    """Send a ``call``/``calls`` command; its ``count`` ``tool.call`` messages."""
    after = session.last_seq
    await session.text(command)
    calls: list[Incoming] = []
    while len(calls) < count:
        calls.append(
            await session.current.expect(
                "tool.call", REPLY, where=lambda i: i.seq > after and i not in calls
            )
        )
    return calls


async def answer(session: Session, call: Incoming, ok: bool = True, **members: Any) -> int:
    """The client's ``tool.result`` for ``call`` (``output`` when ok, else ``code`` and
    ``message``); its seq."""
    fields: dict[str, Any] = {"output": members.pop("output", None)} if ok else {}
    return await session.send(
        "tool.result",
        callId=call.get("callId"),
        epoch=call.get("epoch"),
        ok=ok,
        **fields,
        **members,
    )


async def answered_call(
    session: Session, arguments: str = "{}", ok: bool = True, **result: Any
) -> tuple[Incoming, Turn]:
    """``call lookup ARGUMENTS``: its ``tool.call``, answered (``output`` when ok, else
    ``code`` and ``message``), and the turn read to its end."""
    after = session.last_seq
    (issued,) = await call(session, f"call lookup {arguments}")
    await answer(session, issued, ok, **result)
    return issued, await session.turn(after, REPLY)


async def interrupt(session: Session, epoch: Any) -> Incoming:
    """Interrupt ``epoch`` (reason ``user``); the server's ``interrupted`` that follows."""
    await session.send("interrupt", epoch=epoch, reason="user")
    return await session.current.expect("interrupted", 3.0)


async def interrupted_call(session: Session) -> tuple[Incoming, Incoming]:
    """``call lookup {}``, its epoch interrupted while the call is pending: the
    ``tool.call`` and the ``interrupted``."""
    (issued,) = await call(session, "call lookup {}")
    return issued, await interrupt(session, issued.get("epoch"))


async def speaking(session: Session, ms: int = 1500) -> Incoming:
    """Send ``speak MS``; the ``turn.state speaking`` of its turn (a response in flight
    for about MS ms)."""
    after = session.last_seq
    await session.text(f"speak {ms}")
    return await session.current.expect(
        "turn.state", REPLY, where=lambda i: i.seq > after and i.get("state") == "speaking"
    )


@dataclass(frozen=True)
class ResultLine:
    """One line of a ``call``/``calls`` reply: ``result ok OUTPUT`` (``value`` is the
    parsed output) or ``result error CODE`` (``value`` is the code)."""

    ok: bool
    value: Any

    def __str__(self) -> str:
        return f"result ok {json.dumps(self.value)}" if self.ok else f"result error {self.value}"


def _broken(turn: Turn, ctx: ServerContext, what: str) -> NoReturn:
    raise CheckFailed(
        f"the reply {turn.text!r} does not follow the scripted agent contract: {what}",
        ctx.frames(),
    )


def results(ctx: ServerContext, turn: Turn) -> list[ResultLine]:
    """The result lines of a ``call``/``calls`` reply, in call order."""
    lines: list[ResultLine] = []
    for line in turn.text.split("\n"):
        if line.startswith(_OK):
            try:
                lines.append(ResultLine(True, json.loads(line[len(_OK) :])))
            except ValueError:
                _broken(turn, ctx, f"{line!r} is not 'result ok' followed by JSON")
        elif line.startswith(_ERROR) and line[len(_ERROR) :].strip():
            lines.append(ResultLine(False, line[len(_ERROR) :].strip()))
        else:
            _broken(turn, ctx, f"{line!r} is neither 'result ok OUTPUT' nor 'result error CODE'")
    return lines


def context_reply(ctx: ServerContext, turn: Turn) -> Any:
    """The context a ``context?`` reply names (its JSON, parsed)."""
    try:
        return json.loads(turn.text)
    except ValueError:
        _broken(turn, ctx, "'context?' replies with the context as JSON")
