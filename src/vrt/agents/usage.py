"""Tokens a session's model used, as the provider reported them.

Each model adapter keeps one :class:`TokenUsage` per session (``agent.usage``), adds
every response's usage to it and logs the response's figures at DEBUG on its own
logger (``vrt.agents.openai_realtime`` and so on), so that a metrics exporter can read
the counters and an operator can follow them in the logs. The counters only grow, so
that the server can take a response's usage as the difference between two readings
(:meth:`TokenUsage.since`, docs/operations.md#per-response-metrics).

What each provider reports (all optional; a missing figure counts as 0):

* OpenAI Realtime, ``response.done`` ``response.usage``: ``input_tokens``,
  ``output_tokens``, ``input_token_details.{cached_tokens,audio_tokens}``,
  ``output_token_details.audio_tokens`` (openai-python
  ``types/realtime/realtime_response_usage.py``).
* Chat Completions with ``stream_options.include_usage``: a last chunk with
  ``usage.{prompt_tokens,completion_tokens}``,
  ``usage.prompt_tokens_details.cached_tokens`` (OpenAI API reference, "The chat
  completion chunk object").
* Gemini Live, ``usageMetadata`` on server messages: ``promptTokenCount``,
  ``responseTokenCount``, ``cachedContentTokenCount``, and per-modality
  ``promptTokensDetails`` / ``responseTokensDetails`` (ai.google.dev/api/live,
  "UsageMetadata").
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields, replace

__all__ = ["TokenUsage", "count"]


@dataclass(slots=True)
class TokenUsage:
    """Running totals over a session's responses."""

    #: Responses (completions, turns) whose usage was reported.
    responses: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: Of ``input_tokens``, those served from the provider's prompt cache.
    cached_input_tokens: int = 0
    #: Of ``input_tokens`` and ``output_tokens``, those that were audio.
    input_audio_tokens: int = 0
    output_audio_tokens: int = 0

    @property
    def input_text_tokens(self) -> int:
        """Of ``input_tokens``, those that were not audio: vRT carries text and audio
        only, so the rest is text (LiveKit's ``input_token_details.text_tokens``)."""
        return max(0, self.input_tokens - self.input_audio_tokens)

    @property
    def output_text_tokens(self) -> int:
        """Of ``output_tokens``, those that were not audio (the text, and the
        transcript of the audio where a provider counts it)."""
        return max(0, self.output_tokens - self.output_audio_tokens)

    def copy(self) -> TokenUsage:
        return replace(self)

    def since(self, earlier: TokenUsage) -> TokenUsage:
        """What was added to these totals after they read ``earlier`` (a response's
        usage, from readings at its start and end). A count below ``earlier``'s (the
        agent replaced its counters) gives 0, not a negative figure."""
        return TokenUsage(
            **{
                field.name: max(0, getattr(self, field.name) - getattr(earlier, field.name))
                for field in fields(self)
            }
        )

    def add(self, other: TokenUsage) -> None:
        """Add ``other``'s totals to these (a response's, or a session's to a server's)."""
        self.responses += other.responses
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.input_audio_tokens += other.input_audio_tokens
        self.output_audio_tokens += other.output_audio_tokens

    def record(self, log: logging.Logger, session_id: str, **counts: int) -> None:
        """Add one response's usage (its token counts, by field name) and log it at
        DEBUG with the session's totals."""
        self.add(TokenUsage(responses=1, **counts))
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "session %s: model usage of one response %s; session totals %s",
                session_id,
                counts,
                asdict(self),
            )


def count(value: object) -> int:
    """A token count from a provider's JSON: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
