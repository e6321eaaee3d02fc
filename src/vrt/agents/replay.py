"""The conversation log (``history.py``) as each model provider takes a conversation: what
``restore(history)`` of the model adapters sends to a new provider session or puts in
a new message list, so that a session moved to another process keeps its history
(docs/agents.md, docs/deploy.md).

:func:`conversation` reads the log into what was said, in order, and each client tool
call with its result. The agent's words of a turn are its text, or for a speech model
(``prefer_spoken``) the transcript of its speech when there is one. A call whose result
is not in the log (the session moved while it ran) gets the INTERRUPTED result the
client was sent, which says the tool may or may not have taken effect.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from .function_names import FunctionNames
from .history import (
    AgentSaid,
    HistoryEntry,
    ToolCalled,
    ToolResulted,
    UserSaid,
    coalesce,
)

__all__ = [
    "INTERRUPTED_RESULT",
    "Called",
    "Said",
    "chat_messages",
    "conversation",
    "gemini_turns",
    "realtime_items",
    "result_value",
]

#: What the model is told of a call whose result never came (the session moved).
INTERRUPTED_RESULT: Final = {
    "status": "interrupted",
    "note": "The conversation moved before this result arrived; the tool may or may not "
    "have taken effect. Do not assume it succeeded.",
}


@dataclass(frozen=True, slots=True)
class Said:
    role: Literal["user", "agent"]
    text: str
    #: What the provider attached to the agent's message (``AgentSaid.provider``).
    provider: Any = None


@dataclass(slots=True)
class Called:
    call: ToolCalled
    result: ToolResulted | None = None

    @property
    def provider_id(self) -> str:
        return self.call.provider_id or self.call.call_id


def conversation(history: Sequence[HistoryEntry], *, prefer_spoken: bool) -> list[Said | Called]:
    """What was said and called, in order (see the module docstring)."""
    out: list[Said | Called] = []
    calls: dict[str, Called] = {}
    run: list[AgentSaid] = []

    def end_run() -> None:
        if not run:
            return
        spoken = [e.text for e in run if e.spoken]
        written = [e.text for e in run if not e.spoken]
        chosen = (spoken or written) if prefer_spoken else (written or spoken)
        text = " ".join(part for part in chosen if part)
        if text:
            provider = next((e.provider for e in run if e.provider is not None), None)
            out.append(Said("agent", text, provider))
        run.clear()

    for entry in coalesce(history):
        if isinstance(entry, AgentSaid):
            if run and run[-1].turn_id != entry.turn_id:
                end_run()
            run.append(entry)
            continue
        end_run()
        if isinstance(entry, UserSaid):
            if entry.text:
                out.append(Said("user", entry.text))
        elif isinstance(entry, ToolCalled):
            called = Called(entry)
            calls[entry.call_id] = called
            out.append(called)
        elif isinstance(entry, ToolResulted):
            found = calls.get(entry.call_id)
            if found is not None and found.result is None:
                found.result = entry
        # PlaybackStopped, TurnInterrupted: no provider takes them as history.
    end_run()
    return out


def result_value(called: Called) -> Any:
    """The call's result as the adapters feed results to a model."""
    result = called.result
    if result is None or result.code == "INTERRUPTED":
        return INTERRUPTED_RESULT
    if result.ok:
        return {"output": result.output}
    return {"error": {"code": result.code or "FAILED", "message": result.message or ""}}


def _members(provider: Any) -> dict[str, Any]:
    """The provider's members of a message or call as the chat agent kept them (an
    object of members), none if the entry has none (or another agent's)."""
    if not isinstance(provider, dict):
        return {}
    # The members the message or call has of its own are never replaced.
    return {k: v for k, v in provider.items() if isinstance(k, str) and k not in _OWN}


_OWN: Final = frozenset(
    {"role", "content", "tool_calls", "id", "type", "function", "name", "arguments"}
)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _function(names: FunctionNames, tool: str) -> str:
    try:
        return names.provider(tool)
    except KeyError:  # a tool the session no longer declares: keep a valid name
        return "tool"


def chat_messages(history: Sequence[HistoryEntry], names: FunctionNames) -> list[dict[str, Any]]:
    """The Chat Completions messages (``user``, ``assistant`` with ``tool_calls``,
    ``tool``) of the conversation."""
    messages: list[dict[str, Any]] = []
    pending: list[Called] = []  # calls of the last assistant message, results to follow

    def flush() -> None:
        messages.extend(
            {
                "role": "tool",
                "tool_call_id": called.provider_id,
                "content": _json(result_value(called)),
            }
            for called in pending
        )
        pending.clear()

    for item in conversation(history, prefer_spoken=False):
        if isinstance(item, Said):
            flush()
            role = "user" if item.role == "user" else "assistant"
            messages.append({"role": role, "content": item.text, **_members(item.provider)})
            continue
        # Tool messages are only added by flush(), so the last message is the
        # assistant's text (the calls join it) or a user's (the calls get their own).
        last = messages[-1] if messages else None
        provider = item.call.provider if isinstance(item.call.provider, dict) else {}
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": None}
            messages.append(last)
        for name, value in _members(provider.get("message")).items():
            last.setdefault(name, value)
        last.setdefault("tool_calls", []).append(
            {
                "id": item.provider_id,
                "type": "function",
                "function": {
                    "name": _function(names, item.call.name),
                    "arguments": _json(item.call.arguments)
                    if isinstance(item.call.arguments, dict)
                    else "{}",
                    **_members(provider.get("function")),
                },
                **_members(provider.get("call")),
            }
        )
        pending.append(item)
    flush()
    return messages


def realtime_items(history: Sequence[HistoryEntry], names: FunctionNames) -> list[dict[str, Any]]:
    """The OpenAI Realtime conversation items (``conversation.item.create``) of the
    conversation: messages, function calls and their outputs."""
    items: list[dict[str, Any]] = []
    for item in conversation(history, prefer_spoken=True):
        if isinstance(item, Said):
            if item.role == "user":
                content = [{"type": "input_text", "text": item.text}]
                items.append({"type": "message", "role": "user", "content": content})
            else:
                content = [{"type": "output_text", "text": item.text}]
                items.append({"type": "message", "role": "assistant", "content": content})
            continue
        items.append(
            {
                "type": "function_call",
                "call_id": item.provider_id,
                "name": _function(names, item.call.name),
                "arguments": _json(item.call.arguments),
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": item.provider_id,
                "output": _json(result_value(item)),
            }
        )
    return items


def gemini_turns(history: Sequence[HistoryEntry]) -> list[dict[str, Any]]:
    """``clientContent.turns`` for the Gemini Live API, which takes text turns: what was
    said, and each tool call with its result written out as the model's own note."""
    turns: list[dict[str, Any]] = []
    for item in conversation(history, prefer_spoken=True):
        if isinstance(item, Said):
            role = "user" if item.role == "user" else "model"
            text = item.text
        else:
            role = "model"
            text = (
                f"(called the tool {item.call.name} with {_json(item.call.arguments)}: "
                f"{_json(result_value(item))})"
            )
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"].append({"text": text})
        else:
            turns.append({"role": role, "parts": [{"text": text}]})
    return turns
