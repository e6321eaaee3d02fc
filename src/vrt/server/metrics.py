"""The server's metrics, in the Prometheus exposition format (docs/operations.md).

The counters the I/O path moves are plain integers and floats in objects made once,
one per label value (a message type, a close code): counting a message is one
dictionary lookup by its type and two additions, with no lock and no label handling,
since everything runs on the event loop's thread. ``prometheus-client`` (the
``metrics`` extra) is used as it is meant for state kept elsewhere: a custom collector
reads these numbers, and the server's own state (connections, sessions, buffers), when
it is scraped, so a scrape costs the server what the scrape reads and nothing between
scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from .. import __version__
from ..agents.responses import Response
from ..agents.usage import TokenUsage
from ..protocol.errors import ErrorCode
from ..protocol.messages import CLIENT_TYPES, SERVER_TYPES
from .listener import ConnectionCap

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from ..agents.base import AgentSession

__all__ = [
    "LATENCY_BUCKETS",
    "RESPONSE_BUCKETS",
    "TOKEN_BUCKETS",
    "Histogram",
    "LoopLagProbe",
    "ServerMetrics",
    "Tally",
    "make_registry",
]

#: Seconds: from a millisecond to a minute (turn and tool latencies).
LATENCY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
#: Seconds: a whole response, from a tenth of a second to ten minutes (``speak MS``
#: of the scripted agent goes to 600 s).
RESPONSE_BUCKETS: Final = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
#: Tokens of one response: a reply's output is tens to thousands; its input, the whole
#: conversation so far, grows to the model's context (128k for OpenAI's realtime models).
TOKEN_BUCKETS: Final = (
    10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 25_000.0,
    50_000.0, 100_000.0, 250_000.0,
)  # fmt: skip
#: Output tokens per second of a response's duration.
RATE_BUCKETS: Final = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0)
#: ``vrt_response_tokens{direction, modality}``: what vRT carries (§8, §6.1).
TOKEN_KINDS: Final = (
    ("input", "text"), ("input", "audio"), ("output", "text"), ("output", "audio"),
)  # fmt: skip
#: Seconds: the core's time per received message, from a microsecond.
DECODE_BUCKETS: Final = (
    0.000_002, 0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001,
    0.0025, 0.01,
)  # fmt: skip
#: Seconds: how late the event loop ran a callback.
LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

#: How a session ended (``vrt_sessions_ended_total{outcome}``), from the reasons the
#: server gives when it ends one (``vrt.server.registry``).
END_OUTCOMES: Final = {
    "session closed": "closed",
    "resume window expired": "expired",
    "evicted while parked": "evicted",
    "server shutting down": "shutdown",
    "handed off to another process": "handed_off",
    "resumed on another process": "moved",
    "resume failed": "resume_failed",
    "agent failed": "agent_failed",
}
#: ``vrt_tool_calls_total{outcome}``: ok, or the failure code in lowercase.
TOOL_OUTCOMES: Final = ("ok", "interrupted", "rejected", "invalid", "timeout", "failed")


class ObservedServer(Protocol):
    """What the metrics read of a server when scraped (``VrtServer``)."""

    connection_cap: ConnectionCap

    @property
    def session_count(self) -> int: ...

    @property
    def parked_count(self) -> int: ...

    @property
    def draining(self) -> bool: ...

    def agents(self) -> list[tuple[Any, AgentSession]]: ...


class Tally:
    """A count of messages and their bytes, for one label value."""

    __slots__ = ("bytes", "count")

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0


class Histogram:
    """A histogram of observations (durations in seconds, token counts), exported as a
    Prometheus histogram."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, +Inf last."""
        total, out = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return out


class ServerMetrics:
    """Every counter of one server process; :meth:`collect` exports them.

    ``agent`` names the agent in the model and response metrics (``vrt_model_*{agent}``,
    ``vrt_response_*{agent}``): the name ``vrt serve --agent`` takes.
    """

    def __init__(self, agent: str = "custom") -> None:
        self.agent = agent
        self.server: ObservedServer | None = None
        #: Received text messages by their ``type``, plus ``audio`` and ``invalid``.
        self.received: dict[str, Tally] = {
            name: Tally() for name in (*(cls.TYPE for cls in CLIENT_TYPES), "audio", "invalid")
        }
        #: Sent messages by their ``type`` as bytes (how the I/O path finds them), plus
        #: ``audio``.
        self.sent: dict[bytes, Tally] = {
            name.encode(): Tally() for name in (*(cls.TYPE for cls in SERVER_TYPES), "audio")
        }
        self.errors: dict[str, int] = {code.value: 0 for code in ErrorCode}
        self.closes: dict[int, int] = {}
        self.upgrades_accepted = 0
        self.upgrades_refused: dict[str, int] = {"origin": 0, "version": 0}
        self.sessions_opened = 0
        self.sessions_refused: dict[str, int] = {
            "unauthorized": 0, "limit": 0, "draining": 0, "too_large": 0, "agent_failed": 0,
        }  # fmt: skip
        self.sessions_ended: dict[str, int] = dict.fromkeys(END_OUTCOMES.values(), 0)
        self.resumes: dict[str, int] = {"resumed": 0, "refused": 0, "failed": 0}
        self.tool_calls: dict[str, int] = dict.fromkeys(TOOL_OUTCOMES, 0)
        self.tool_seconds = Histogram(LATENCY_BUCKETS)
        self.text_first_chunk = Histogram(LATENCY_BUCKETS)
        self.speech_first_audio = Histogram(LATENCY_BUCKETS)
        self.decode_text = Histogram(DECODE_BUCKETS)
        self.decode_binary = Histogram(DECODE_BUCKETS)
        self.loop_lag = Histogram(LAG_BUCKETS)
        #: Per response (``vrt.agents.responses``), for this server's agent.
        self.response_first_text = Histogram(LATENCY_BUCKETS)
        self.response_first_audio = Histogram(LATENCY_BUCKETS)
        self.response_seconds: dict[str, Histogram] = {
            outcome: Histogram(RESPONSE_BUCKETS) for outcome in ("completed", "interrupted")
        }
        self.response_tokens: dict[tuple[str, ...], Histogram] = {
            kind: Histogram(TOKEN_BUCKETS) for kind in TOKEN_KINDS
        }
        self.response_token_rate = Histogram(RATE_BUCKETS)
        self.output_audio_dropped = 0
        self.write_pauses = 0
        self.aborted: dict[str, int] = {"buffer": 0, "timeout": 0}
        #: Input audio frames dropped by the agents of sessions that have ended (the
        #: live ones are read from their sessions when scraped).
        self.input_audio_dropped_ended = 0
        #: Model usage of the sessions that have ended, by agent name.
        self.usage_ended: dict[str, TokenUsage] = {}
        #: Whether the server is ready (health.py sets it; ``vrt_ready``).
        self.ready: Callable[[], bool] = lambda: True
        #: Buffered output of every live connection, read when scraped.
        self.buffered: Callable[[], Iterable[int]] = tuple

    def bind(self, server: ObservedServer) -> None:
        """Read the live state of ``server`` when scraped."""
        self.server = server

    # -- what ended sessions leave behind --

    def session_ended(self, reason: str, usage: TokenUsage | None, dropped_audio: int) -> None:
        outcome = END_OUTCOMES.get(reason, "closed")
        self.sessions_ended[outcome] = self.sessions_ended.get(outcome, 0) + 1
        self.input_audio_dropped_ended += dropped_audio
        if usage is not None:
            total = self.usage_ended.setdefault(self.agent, TokenUsage())
            total.add(usage)

    def response_ended(self, response: Response) -> None:
        """A response ended (``ResponseWatch``): its latencies, duration and tokens."""
        first = response.time_to_first_text
        if first is not None:
            self.response_first_text.observe(first)
        first = response.time_to_first_audio
        if first is not None:
            self.response_first_audio.observe(first)
        self.response_seconds[response.outcome].observe(response.duration)
        usage = response.usage
        if usage is not None:
            tokens = self.response_tokens
            tokens["input", "text"].observe(usage.input_text_tokens)
            tokens["input", "audio"].observe(usage.input_audio_tokens)
            tokens["output", "text"].observe(usage.output_text_tokens)
            tokens["output", "audio"].observe(usage.output_audio_tokens)
            rate = response.output_tokens_per_second
            if rate is not None:
                self.response_token_rate.observe(rate)

    def tool_settled(self, ok: bool, code: str | None, seconds: float | None) -> None:
        outcome = "ok" if ok else (code or "FAILED").lower()
        if outcome not in self.tool_calls:
            outcome = "failed"
        self.tool_calls[outcome] += 1
        if seconds is not None:
            self.tool_seconds.observe(seconds)

    def error_sent(self, code: str) -> None:
        key = code if code in self.errors else "other"
        self.errors[key] = self.errors.get(key, 0) + 1

    def closed(self, code: int) -> None:
        self.closes[code] = self.closes.get(code, 0) + 1

    # -- export --

    def collect(self) -> Iterator[Any]:
        """The metric families (prometheus_client's custom collector interface)."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        def counter(name: str, doc: str, label: str, values: dict[Any, int]) -> Any:
            family = CounterMetricFamily(name, doc, labels=[label] if label else [])
            for key, value in values.items():
                shown = key.decode() if isinstance(key, bytes) else str(key)
                family.add_metric([shown] if label else [], value)
            return family

        def histogram(name: str, doc: str, data: dict[str, Histogram], label: str = "") -> Any:
            family = HistogramMetricFamily(name, doc, labels=[label] if label else [])
            for key, hist in data.items():
                family.add_metric([key] if label else [], hist.buckets(), hist.sum)
            return family

        def by_agent(
            name: str, doc: str, data: dict[tuple[str, ...], Histogram], labels: tuple[str, ...]
        ) -> Any:
            family = HistogramMetricFamily(name, doc, labels=["agent", *labels])
            for key, hist in data.items():
                family.add_metric([self.agent, *key], hist.buckets(), hist.sum)
            return family

        def gauge(name: str, doc: str, value: float, label: str = "", key: str = "") -> Any:
            family = GaugeMetricFamily(name, doc, labels=[label] if label else [])
            family.add_metric([key] if label else [], value)
            return family

        info = GaugeMetricFamily("vrt_build_info", "The vrt version; always 1.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        server = self.server
        dropped_in = self.input_audio_dropped_ended
        # Copies: the live sessions are added to them below.
        usage = {agent: copy.copy(total) for agent, total in self.usage_ended.items()}
        if server is not None:
            cap = server.connection_cap
            yield gauge("vrt_connections", "TCP connections open, upgraded or not.", cap.open)
            yield gauge(
                "vrt_connections_limit", "Connections beyond which one is refused.", cap.limit
            )
            refused = {**self.upgrades_refused, "limit": cap.refused}
            parked = server.parked_count
            sessions = GaugeMetricFamily(
                "vrt_sessions", "Live sessions, by state.", labels=["state"]
            )
            sessions.add_metric(["connected"], server.session_count - parked)
            sessions.add_metric(["parked"], parked)
            yield sessions
            yield gauge("vrt_draining", "1 once the server is shutting down.", server.draining)
            live = usage.setdefault(self.agent, TokenUsage())
            for agent, agent_session in server.agents():
                dropped_in += agent_session.dropped_audio
                found = getattr(agent, "usage", None)
                if isinstance(found, TokenUsage):
                    live.add(found)
        else:
            refused = dict(self.upgrades_refused)
        yield gauge("vrt_ready", "1 while the server takes new sessions.", self.ready())
        buffered = list(self.buffered())
        yield gauge(
            "vrt_write_buffered_bytes", "Output buffered for all connections.", sum(buffered)
        )
        yield gauge(
            "vrt_write_buffered_bytes_max",
            "The most output buffered for one connection.",
            max(buffered, default=0),
        )
        yield counter(
            "vrt_connections_accepted",
            "WebSocket upgrades accepted.",
            "",
            {"": self.upgrades_accepted},
        )
        yield counter(
            "vrt_connections_refused",
            "Connections refused: at the connection limit (503), a browser origin not "
            "allowed (403), a WebSocket version other than 13 (426).",
            "reason",
            refused,
        )
        yield counter(
            "vrt_connections_closed",
            "WebSocket closes the server sent, by close code.",
            "code",
            self.closes,
        )
        yield counter(
            "vrt_slow_readers_aborted",
            "Connections aborted for not reading their output: past the buffer limit or "
            "the write timeout.",
            "reason",
            self.aborted,
        )
        yield counter(
            "vrt_write_pauses",
            "Times a connection's buffered output crossed the high-water mark.",
            "",
            {"": self.write_pauses},
        )
        yield counter("vrt_sessions_opened", "New sessions opened.", "", {"": self.sessions_opened})
        yield counter(
            "vrt_sessions_refused",
            "New sessions refused, by reason.",
            "reason",
            self.sessions_refused,
        )
        yield counter(
            "vrt_sessions_ended", "Sessions ended, by outcome.", "outcome", self.sessions_ended
        )
        yield counter("vrt_resumes", "Resume attempts (§5.4), by outcome.", "outcome", self.resumes)
        received = {name: tally.count for name, tally in self.received.items()}
        yield counter("vrt_messages_received", "Messages received, by type.", "type", received)
        yield counter(
            "vrt_messages_received_bytes",
            "Bytes of the messages received, by type.",
            "type",
            {name: tally.bytes for name, tally in self.received.items()},
        )
        yield counter(
            "vrt_messages_sent",
            "Messages written, by type.",
            "type",
            {name: tally.count for name, tally in self.sent.items()},
        )
        yield counter(
            "vrt_messages_sent_bytes",
            "Bytes of the messages written, by type.",
            "type",
            {name: tally.bytes for name, tally in self.sent.items()},
        )
        yield counter("vrt_errors_sent", "error messages sent, by code (§9).", "code", self.errors)
        dropped = CounterMetricFamily(
            "vrt_audio_frames_dropped",
            "Audio frames dropped: input the agent left unread, output a slow reader "
            "could not take.",
            labels=["direction"],
        )
        dropped.add_metric(["input"], dropped_in)
        dropped.add_metric(["output"], self.output_audio_dropped)
        yield dropped
        yield counter(
            "vrt_tool_calls", "Client tool calls settled, by outcome.", "outcome", self.tool_calls
        )
        yield histogram(
            "vrt_tool_call_seconds",
            "From a tool.call written to its settlement.",
            {"": self.tool_seconds},
        )
        yield histogram(
            "vrt_text_first_chunk_seconds",
            "From a user text received to the reply's first text chunk written.",
            {"": self.text_first_chunk},
        )
        yield histogram(
            "vrt_speech_first_audio_seconds",
            "From the end of the user's speech (the turn leaves listening) to the "
            "reply's first audio frame written.",
            {"": self.speech_first_audio},
        )
        yield histogram(
            "vrt_decode_seconds",
            "The core's time to decode and act on one received message.",
            {"text": self.decode_text, "binary": self.decode_binary},
            "frame",
        )
        yield histogram(
            "vrt_event_loop_lag_seconds",
            "How late the event loop ran a periodic probe.",
            {"": self.loop_lag},
        )
        responses = CounterMetricFamily(
            "vrt_model_responses", "Model responses whose usage was reported.", labels=["agent"]
        )
        tokens = CounterMetricFamily(
            "vrt_model_tokens",
            "Tokens the model reported: all, cached (of input), audio and text.",
            labels=["agent", "direction", "kind"],
        )
        for name, total in usage.items():
            responses.add_metric([name], total.responses)
            for direction, kind, value in (
                ("input", "all", total.input_tokens),
                ("input", "cached", total.cached_input_tokens),
                ("input", "audio", total.input_audio_tokens),
                ("input", "text", total.input_text_tokens),
                ("output", "all", total.output_tokens),
                ("output", "audio", total.output_audio_tokens),
                ("output", "text", total.output_text_tokens),
            ):
                tokens.add_metric([name, direction, kind], value)
        yield responses
        yield tokens
        yield by_agent(
            "vrt_response_time_to_first_text_seconds",
            "From a response's beginning to its first text (a text chunk or an agent transcript).",
            {(): self.response_first_text},
            (),
        )
        yield by_agent(
            "vrt_response_time_to_first_audio_seconds",
            "From a response's beginning to its first output audio frame.",
            {(): self.response_first_audio},
            (),
        )
        yield by_agent(
            "vrt_response_duration_seconds",
            "From a response's beginning to its end, by how it ended.",
            {(outcome,): hist for outcome, hist in self.response_seconds.items()},
            ("outcome",),
        )
        yield by_agent(
            "vrt_response_tokens",
            "Tokens the model reported for one response, by direction and modality.",
            self.response_tokens,
            ("direction", "modality"),
        )
        yield by_agent(
            "vrt_response_output_tokens_per_second",
            "A response's output tokens over its duration.",
            {(): self.response_token_rate},
            (),
        )


def make_registry(metrics: ServerMetrics) -> CollectorRegistry:
    """A registry with ``metrics`` and the process's own (CPU, memory, file handles,
    garbage collection, Python version)."""
    from prometheus_client import (
        GC_COLLECTOR,
        PLATFORM_COLLECTOR,
        PROCESS_COLLECTOR,
        CollectorRegistry,
    )

    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)  # a custom collector: it has collect()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        with contextlib.suppress(ValueError):
            registry.register(collector)
    return registry


class LoopLagProbe:
    """Measures how late the event loop runs a callback scheduled every ``interval``
    seconds: one timer per interval, nothing else."""

    def __init__(self, histogram: Histogram, interval: float = 0.5) -> None:
        self.histogram = histogram
        self.interval = interval
        self.last = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self.interval
        self._handle = loop.call_at(self._due, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        self.last = max(0.0, now - self._due)
        self.histogram.observe(self.last)
        self._due = now + self.interval
        self._handle = loop.call_at(self._due, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
