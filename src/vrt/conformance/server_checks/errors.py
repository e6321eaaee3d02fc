"""§9 Errors (the test vectors, invalid messages, AGENT_ERROR), §10/§11 limits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

from ...protocol.artifacts import artifact_root
from ..framework import CheckFailed
from ..server_context import REPLY, ServerContext, check
from ..spec_tables import CLIENT_SEQUENCED
from ..wire import Closed, Incoming, NoFrame, WireError, compact
from ..wire_session import Session

# §9.1 The vectors of examples/: every case, in an open session

_NUMBER: Final = re.compile(r'("seq"\s*:\s*)(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')


def _vector_files() -> list[Path]:
    root = artifact_root() / "examples"
    return [*sorted((root / "client").glob("*.json")), root / "binary" / "frames.json"]


def _with_seq(case: dict[str, Any], text: str, seq: int) -> str | None:
    """The valid sequenced vector ``case`` with its seq rewritten to ``seq`` (keeping the
    spelling style of a text-form case); None when the seq cannot be found."""
    if "message" in case:
        return compact({**case["message"], "seq": seq})
    match = _NUMBER.search(text)
    if match is None:
        return None
    number = match.group(2)
    spelled = f"{seq}e0" if "e" in number.lower() else f"{seq}.0" if "." in number else str(seq)
    return text[: match.start(2)] + spelled + text[match.end(2) :]


def _vector_type(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) else None


def _judge_vector(case: dict[str, Any], expected: str | None, items: list[Incoming]) -> str:
    errors = [i for i in items if i.type == "error"]
    invalid = [i for i in items if i.type == "invalid"]
    if invalid:
        return f"{case['id']}: the server sent an invalid frame: {invalid[0]}"
    if expected is None:
        return f"{case['id']}: valid, but answered error {errors[0].get('code')}" if errors else ""
    if len(errors) != 1:
        codes = [e.get("code") for e in errors]
        return f"{case['id']}: expected one error {expected}, got {codes or 'none'}"
    error = errors[0]
    if error.get("code") != expected:
        return f"{case['id']}: expected {expected}, got {error.get('code')}"
    if error.get("recoverable") is not True:
        return f"{case['id']}: {expected} must be recoverable: true"
    if error.seq == 0:
        return f"{case['id']}: {expected} has seq 0 in an open session (sequenced, §4.1)"
    return ""


async def _send_case(
    session: Session, case: dict[str, Any], binary: bool
) -> tuple[str | None, int, str]:
    """Send one case; its expected error (None: none), the pongs to wait for, and a
    note when it could not be sent."""
    conn = session.current
    expected: str | None = None if case["valid"] else case["error"]
    if binary:
        await conn.send(bytes.fromhex(case["hex"]))
        return expected, 1, ""
    text = case["text"] if "text" in case else compact(case["message"])
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return expected, 0, f"{case['id']}: not sent (its text is not UTF-8)"
    kind = _vector_type(text)
    if case["valid"] and kind in CLIENT_SEQUENCED:
        rewritten = _with_seq(case, text, session.next_seq)
        if rewritten is None:
            return expected, 0, f"{case['id']}: not sent (no seq to rewrite)"
        await session.send_counted(rewritten)
        return expected, 1, ""
    if case["valid"] and kind == "hello":
        expected = "DUPLICATE_HELLO"
    await conn.send(text)
    return expected, 2 if case["valid"] and kind == "ping" else 1, ""


async def _run_vectors(ctx: ServerContext, path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    binary = "sender" not in document
    session = await ctx.session()
    problems: list[str] = []
    notes: list[str] = []
    evidence: list[str] = []
    for case in document["cases"]:
        if binary and case["receiver"] != "server":
            continue
        mark = len(ctx.log.lines)
        try:
            expected, pongs, note = await _send_case(session, case, binary)
            if note:
                notes.append(note)
                continue
            items = await session.current.barrier(pongs=pongs)
        except Closed as closed:
            ctx.fail(f"after case {case['id']} the server closed the connection: {closed}")
        except NoFrame as exc:
            ctx.fail(f"after case {case['id']} the server stalled: {exc}")
        problem = _judge_vector(case, expected, items)
        if problem:
            problems.append(problem)
            evidence += [str(line) for line in ctx.log.lines[mark : mark + 8]]
    try:
        await ctx.alive(session, "after the vectors")
    except CheckFailed as failed:
        problems.append(str(failed))
    if problems:
        more = [f"... and {len(problems) - 40} more"] if len(problems) > 40 else []
        raise CheckFailed("\n".join(problems[:40] + more + notes), evidence[:120] or ctx.frames())


def _register_vectors() -> None:
    for path in _vector_files():
        folder = path.parent.name

        async def run(ctx: ServerContext, path: Path = path) -> None:
            await _run_vectors(ctx, path)

        check(
            "§8.1" if folder == "binary" else "§9.1",
            "MUST",
            f"examples/{folder}/{path.name}: every case, exact code, in an open session",
            id=f"vectors-{folder}-{path.stem.replace('.', '-')}",
        )(run)


_register_vectors()


@check("§9.1", "MUST", needs=("scripted",))
async def check_invalid_not_acted_on(ctx: ServerContext) -> None:
    """an invalid message is not acted on (not even its seq)"""
    session = await ctx.session()
    seq = session.next_seq
    await session.current.send(
        f'{{"v":1,"seq":{seq},"type":"text","text":"echo invalid-one","text":"echo invalid-one"}}'
    )
    await ctx.expect_error(session.current, "INVALID_FIELD", what="a duplicate member")
    await session.reply("echo valid-one", REPLY, expect="valid-one")
    ctx.expect(
        "invalid-one" not in session.turns().values(), "the server acted on an invalid message"
    )


@check("§9.2", "MUST", needs=("scripted",))
async def check_agent_error_recoverable(ctx: ServerContext) -> None:
    """AGENT_ERROR is sequenced, flagged, and the session goes on"""
    session = await ctx.session()
    await session.text("error")
    error = await session.current.expect("error", REPLY)
    ctx.expect(error.get("code") == "AGENT_ERROR", f"'error' gave {error.get('code')}")
    ctx.expect(error.get("recoverable") is True, "the scripted AGENT_ERROR is recoverable: true")
    ctx.expect_sequenced(session, error, "AGENT_ERROR")
    await ctx.alive(session, "after a recoverable AGENT_ERROR")


# §10 / §11 Limits


async def _oversized(session: Session, text: str) -> tuple[str, Incoming | None]:
    """Send an oversized control message; what happened: "error", "handled", "close",
    "dropped" or "silent"."""
    conn = session.current
    seq = session.next_seq
    try:
        await conn.send(text)
        items = await conn.until(
            lambda i: (
                i.type == "error"
                or (i.type == "ack" and isinstance(i.get("upTo"), int) and i.get("upTo") >= seq)
            ),
            5.0,
            "an answer",
        )
    except Closed:
        return ("close" if conn.close_frame is not None else "dropped"), None
    except NoFrame:
        return "silent", None
    last = items[-1]
    if last.type == "ack":
        session.skip_seqs(1)
        return "handled", last
    return "error", last


async def _survives(
    ctx: ServerContext, session: Session, outcome: str, error: Incoming | None
) -> None:
    if outcome in ("error", "handled") and not session.current.closed.is_set():
        await ctx.alive(session, f"after an oversized message ({outcome})")
    elif error is None or error.get("recoverable") is not False:
        # Closed without a non-recoverable error first: the session must resume (§11).
        try:
            await session.resume()
        except WireError as exc:
            ctx.fail(f"the connection closed ({outcome}) and the session cannot be resumed: {exc}")
        await ctx.alive(session, "after resuming")
    await ctx.alive(await ctx.session(), "in a new session")


def _huge_context(seq: int, size: int) -> str:
    return compact({"v": 1, "seq": seq, "type": "context", "context": "x" * size})


@check("§11", "SHOULD")
async def check_limits_large_frame_answered(ctx: ServerContext) -> None:
    """a 2 MiB control message is answered (error or close), not ignored"""
    session = await ctx.session()
    outcome, error = await _oversized(session, _huge_context(session.next_seq, 2 << 20))
    ctx.expect(outcome not in ("silent", "dropped"), f"a 2 MiB message: {outcome}")
    if error is not None:
        ctx.expect(
            error.get("recoverable") is True or session.current.closed.is_set(),
            "a non-recoverable error must close the session",
        )


@check("§9.1, §11", "MUST")
async def check_limits_huge_frames_survived(ctx: ServerContext) -> None:
    """huge frames never crash the server"""
    session = await ctx.session()
    for size in (2 << 20, 6 << 20):
        outcome, error = await _oversized(session, _huge_context(session.next_seq, size))
        ctx.expect(outcome != "silent", f"a {size >> 20} MiB message was silently ignored")
        await _survives(ctx, session, outcome, error)


@check("§9.1, §11", "MUST")
async def check_limits_deep_nesting_survived(ctx: ServerContext) -> None:
    """deep nesting never crashes the server"""
    session = await ctx.session()
    depth = 100_000
    text = (
        f'{{"v":1,"seq":{session.next_seq},"type":"context","context":'
        + "[" * depth
        + "]" * depth
        + "}"
    )
    outcome, error = await _oversized(session, text)
    ctx.expect(outcome != "silent", "a deeply nested message was silently ignored")
    await _survives(ctx, session, outcome, error)
