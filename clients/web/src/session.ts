/**
 * The client role, sans I/O: a {@link ClientSession} across its connections (§5.1).
 *
 * A driver calls {@link ClientSession.connectionMade} when a WebSocket opens, feeds it
 * the frames it receives with the time, writes out {@link ClientSession.takeOutbox} and
 * hands {@link ClientSession.takeEvents} to the application. The session keeps the
 * epoch gate (§6.2): tool calls of a closed epoch never start, output audio of a closed
 * epoch is never delivered. Calls run one at a time in the order received (§7.1): the
 * session emits `toolCall` for the next call once the previous one has its result, and
 * the driver answers with {@link ClientSession.toolFinished}. It mirrors the Python
 * `vrt.protocol.client.ClientSession` rule for rule; times are milliseconds.
 */

import { decodeServer, DEFAULT_LIMITS, encode, type Limits } from "./codec.js";
import type { VrtEvent } from "./events.js";
import { buildFrame, INPUT, parseFrame } from "./frames.js";
import {
  formatRate,
  type AudioStart,
  type ClientMessage,
  type ErrorMessage,
  type FailureCode,
  type Format,
  type InterruptReason,
  type Ready,
  type ServerMessage,
  type ToolCall,
  type ToolDeclaration,
  type ToolStream,
} from "./messages.js";
import { DEFAULT_MAX_KEPT, IncomingStream, OutgoingStream } from "./streams.js";

/** §4.4 RECOMMENDED ping interval. */
export const PING_INTERVAL_MS = 15_000;
/** §4.4: a connection silent for this many ping intervals is dead. */
export const DEAD_AFTER_INTERVALS = 2.5;
/** Close code for a connection this client found dead (§9.3). */
export const CLOSE_DEAD = 4000;
export const TOOL_STREAM = "tool-stream-v1";

export type SessionState = "idle" | "waiting" | "open" | "closed";

export type Output =
  | { kind: "text"; data: string }
  | { kind: "binary"; data: Uint8Array }
  | { kind: "close"; code: number; reason: string };

/** What the session tells its driver: application events, and a running call to cancel. */
export type SessionEvent = VrtEvent | { type: "toolCancel"; callId: string };

export interface SessionOptions {
  tools?: ToolDeclaration[];
  input?: Format;
  output?: Format;
  capabilities?: string[];
  /** Initial application context (§5.5); sent only when opening a new session. */
  context?: unknown;
  auth?: string | Record<string, unknown>;
  maxKept?: number;
  pingIntervalMs?: number;
  limits?: Limits;
}

interface Item {
  id: string;
  epoch: number;
  receivedMs: number;
}

const TERMINAL = new Set(["settled", "cancelled", "failed"]);

export class ClientSession {
  state: SessionState = "idle";
  sessionId: string | null = null;
  input: Format | null = null;
  output: Format | null = null;
  capabilities: string[] = [];
  readonly outgoing: OutgoingStream;
  readonly incoming = new IncomingStream();
  observedEpoch = 0;
  closedEpoch: number | null = null;
  /** The server refused `auth` (§5.3): set a fresh credential before reconnecting. */
  authRefused = false;
  auth: string | Record<string, unknown> | undefined;
  readonly pingIntervalMs: number;
  readonly tools: Map<string, ToolDeclaration>;

  private readonly options: SessionOptions;
  private readonly limits: Limits;
  private outbox: Output[] = [];
  private events: SessionEvent[] = [];
  private queue: ToolCall[] = [];
  private running: ToolCall | null = null;
  private readonly answered = new Set<string>();
  private item: Item | null = null;
  private readonly items = new Map<string, Item>();
  private readonly streams = new Map<string, { phase: string; message: ToolStream }>();
  private audioSeq = 0;
  private lastSent = 0;
  private lastReceived = 0;
  private pingSentAt: number | null = null;
  /** The round trip of the last answered ping (§4.4), in milliseconds. */
  rttMs: number | null = null;

  constructor(options: SessionOptions = {}) {
    const names = (options.tools ?? []).map((t) => t.name);
    if (new Set(names).size !== names.length) throw new Error("tool names must be unique (§5.2)");
    this.options = options;
    this.tools = new Map((options.tools ?? []).map((t) => [t.name, t]));
    this.auth = options.auth;
    this.outgoing = new OutgoingStream(options.maxKept ?? DEFAULT_MAX_KEPT);
    this.pingIntervalMs = options.pingIntervalMs ?? PING_INTERVAL_MS;
    this.limits = options.limits ?? DEFAULT_LIMITS;
  }

  // -- driver interface --

  takeOutbox(): Output[] {
    const out = this.outbox;
    this.outbox = [];
    return out;
  }

  takeEvents(): SessionEvent[] {
    const events = this.events;
    this.events = [];
    return events;
  }

  /** Whether a lost connection may be resumed (§5.4). */
  get resumable(): boolean {
    return this.sessionId !== null && this.state !== "closed";
  }

  /** A WebSocket opened: send hello, resuming when a session exists (§5.1). */
  connectionMade(now: number): void {
    if (this.state === "closed") throw new Error("the session is closed; start a new client");
    this.authRefused = false;
    this.lastReceived = now;
    this.item = null; // §8.3: a new connection starts without a current item
    const auth = this.auth !== undefined ? { auth: this.auth } : {};
    let hello: ClientMessage;
    if (this.sessionId === null) {
      const o = this.options;
      hello = {
        type: "hello",
        ...(this.tools.size > 0 ? { tools: [...this.tools.values()] } : {}),
        ...(o.input ? { input: o.input } : {}),
        ...(o.output ? { output: o.output } : {}),
        ...(o.capabilities?.length ? { capabilities: o.capabilities } : {}),
        ...(o.context !== undefined ? { context: o.context } : {}),
        ...auth,
      };
    } else {
      // §5.2: context only when opening; tools are those declared at the start (§5.4).
      hello = { type: "hello", sessionId: this.sessionId, resumeFrom: this.incoming.lastSeq, ...auth };
    }
    this.state = "waiting";
    this.write(encode(hello, 0), now);
  }

  connectionLost(): void {
    if (this.state !== "closed") this.state = "idle";
    this.pingSentAt = null;
    this.item = null;
  }

  receiveText(data: string, now: number): void {
    this.lastReceived = now;
    if (this.state === "closed") return;
    const decoded = decodeServer(data, this.limits);
    if (!decoded.ok) {
      // §9.1: a client reports an invalid message and continues.
      this.events.push({ type: "error", code: decoded.code, message: decoded.reason, recoverable: true });
      return;
    }
    const message = decoded.message;
    if (decoded.seq !== 0) {
      if (this.state !== "open") return; // nothing sequenced precedes ready on a connection
      if (!this.incoming.receive(decoded.seq, now)) return; // §4.3 duplicate
      this.events.push({ type: "message", seq: decoded.seq, message });
      this.handleSequenced(message, now);
    } else if (message.type === "ready") {
      this.ready(message, now);
    } else if (message.type === "audio.start") {
      this.audioStart(message);
    } else if (message.type === "ack") {
      this.outgoing.ack(message.upTo);
    } else if (message.type === "error") {
      this.error(message); // seq 0: no session bound to the connection
    } else if (message.type === "pong" && this.pingSentAt !== null) {
      this.rttMs = now - this.pingSentAt;
      this.pingSentAt = null;
    }
  }

  receiveBinary(data: ArrayBuffer | Uint8Array, now: number): void {
    this.lastReceived = now;
    const frame = parseFrame(data, "client");
    if (frame === null) return; // §8.1: a client drops a malformed frame
    const item = this.item;
    // §8.3: frames before any audio.start, and of a closed epoch, are discarded.
    if (item === null || this.isClosed(item.epoch) || this.state !== "open") return;
    item.receivedMs += this.duration(frame.payload);
    this.events.push({ type: "audio", itemId: item.id, seq: frame.seq, payload: frame.payload });
  }

  /** When {@link onTimer} must next run, or null when no timer is needed. */
  timerDeadline(): number | null {
    if (this.state === "idle" || this.state === "closed") return null;
    let deadline = Math.min(
      this.lastSent + this.pingIntervalMs,
      this.lastReceived + DEAD_AFTER_INTERVALS * this.pingIntervalMs,
    );
    const ack = this.incoming.ackDeadline();
    if (ack !== null && this.state === "open") deadline = Math.min(deadline, ack);
    return deadline;
  }

  onTimer(now: number): void {
    if (this.state === "idle" || this.state === "closed") return;
    if (now >= this.lastReceived + DEAD_AFTER_INTERVALS * this.pingIntervalMs) {
      // §4.4: treat the connection as dead, close it and resume.
      this.outbox.push({ kind: "close", code: CLOSE_DEAD, reason: "no frame from the server" });
      this.connectionLost();
      return;
    }
    if (this.state === "open") {
      const upTo = this.incoming.takeAck(now);
      if (upTo !== null) this.write(encode({ type: "ack", upTo }, 0), now);
    }
    if (now >= this.lastSent + this.pingIntervalMs) this.ping(now);
  }

  /** Send a ping (§4.4: allowed before ready too); its pong sets {@link rttMs}. */
  ping(now: number): void {
    if (this.state === "idle" || this.state === "closed") return;
    this.pingSentAt ??= now;
    this.write(encode({ type: "ping" }, 0), now);
  }

  // -- application actions --

  /** User text input (§6.3). */
  sendText(text: string, now: number): void {
    this.send({ type: "text", text }, now);
  }

  /** Replace the application context; null clears it (§5.5). */
  updateContext(context: unknown, now: number): void {
    this.send({ type: "context", context }, now);
  }

  /** The user interrupted: close the observed epoch locally at once, then tell the server (§6.2). */
  interrupt(reason: InterruptReason, now: number): number {
    const epoch = this.observedEpoch;
    this.closeEpoch(epoch, true, now);
    this.send({ type: "interrupt", epoch, reason }, now);
    return epoch;
  }

  /** Report how much of an item was played (§8.4), never more than was received. */
  playback(itemId: string, playedMs: number, now: number): number {
    const limit = this.items.get(itemId)?.receivedMs ?? 0;
    const played = Math.max(0, Math.floor(Math.min(playedMs, limit)));
    this.send({ type: "playback", itemId, playedMs: played }, now);
    return played;
  }

  /** One input audio frame; false (dropped) when no connection is open (§5.1, §5.4). */
  sendAudio(payload: Uint8Array, now: number): boolean {
    if (this.state !== "open") return false;
    const seq = this.audioSeq;
    this.audioSeq = (seq + 1) % 4294967296;
    this.outbox.push({ kind: "binary", data: buildFrame(INPUT, seq, payload) });
    this.lastSent = now;
    return true;
  }

  /**
   * The running call ended. Sends its result unless it was already answered
   * (interrupted), then starts the next call. False when the outcome is discarded.
   */
  toolFinished(
    callId: string,
    outcome: { ok: true; output: unknown } | { ok: false; code: FailureCode; message: string | null },
    now: number,
  ): boolean {
    const running = this.running;
    if (running === null || running.callId !== callId) return false;
    this.running = null;
    const sent = this.answer(running, outcome, now);
    this.nextCall(now);
    return sent;
  }

  // -- internals: sending --

  private write(data: string, now: number): void {
    this.outbox.push({ kind: "text", data });
    this.lastSent = now;
  }

  /** A sequenced message: kept for resends; written only while open (§5.1), else after the next ready. */
  private send(message: ClientMessage, now: number): void {
    if (this.state === "closed") throw new Error("the session is closed");
    const data = this.outgoing.send(message);
    if (this.state === "open") this.write(data, now);
  }

  /** §7.2: exactly one tool.result per call. */
  private answer(
    call: ToolCall,
    outcome: { ok: true; output: unknown } | { ok: false; code: FailureCode; message: string | null },
    now: number,
  ): boolean {
    if (this.answered.has(call.callId)) return false;
    this.answered.add(call.callId);
    const base = { type: "tool.result", callId: call.callId, epoch: call.epoch } as const;
    const result: ClientMessage = outcome.ok
      ? { ...base, ok: true, output: outcome.output === undefined ? null : outcome.output }
      : { ...base, ok: false, code: outcome.code, message: outcome.message };
    if (this.state !== "closed") this.send(result, now);
    const { callId, epoch } = call;
    this.events.push(
      outcome.ok
        ? { type: "toolResult", callId, name: call.name, epoch, ok: true, output: outcome.output ?? null }
        : { type: "toolResult", callId, name: call.name, epoch, ok: false, code: outcome.code, message: outcome.message },
    );
    return true;
  }

  private answerInterrupted(call: ToolCall, now: number): void {
    this.answer(call, { ok: false, code: "INTERRUPTED", message: "the turn was interrupted" }, now);
  }

  // -- internals: receiving --

  private ready(ready: Ready, now: number): void {
    if (this.state !== "waiting") return;
    const resumed = ready.resumedFrom !== undefined;
    if (resumed !== (this.sessionId !== null) || (this.sessionId !== null && ready.sessionId !== this.sessionId)) {
      this.fail("RESUME_FAILED", "ready does not match the session resumed");
      return;
    }
    const resend = this.outgoing.resendAfter(ready.resumedFrom ?? 0);
    if (resend === null) {
      // §5.4: the client cannot resend what the server lacks.
      this.outbox.push({ kind: "close", code: 1000, reason: "resume failed" });
      this.fail("RESUME_FAILED", "cannot resend what the server missed (§5.4)");
      return;
    }
    this.state = "open";
    this.sessionId = ready.sessionId;
    this.input = ready.input;
    this.output = ready.output;
    this.capabilities = ready.capabilities ?? [];
    for (const data of resend) this.write(data, now); // §5.4: in order, before anything new
    this.events.push({
      type: "connected",
      sessionId: ready.sessionId,
      resumed,
      input: ready.input,
      output: ready.output,
      capabilities: this.capabilities,
    });
  }

  private error(error: ErrorMessage): void {
    if (error.code === "UNAUTHORIZED") {
      // §5.3: do not retry the same credential; a fresh one may be tried.
      this.state = "idle";
      this.authRefused = true;
      this.events.push({ type: "sessionFailed", code: error.code, message: error.message });
    } else if (!error.recoverable && this.state === "waiting") {
      this.fail(error.code, error.message); // RESUME_FAILED, START_FAILED, ...
    } else {
      this.events.push({ type: "error", code: error.code, message: error.message, recoverable: error.recoverable });
    }
  }

  /** §5.4: after RESUME_FAILED nothing old is ever resent, here or elsewhere. */
  fail(code: string, message: string): void {
    if (this.state === "closed") return;
    this.state = "closed";
    this.queue = [];
    this.events.push({ type: "sessionFailed", code, message });
  }

  private handleSequenced(message: ServerMessage, now: number): void {
    switch (message.type) {
      case "tool.call":
        this.observe(message.epoch);
        this.toolCall(message, now);
        break;
      case "turn.state":
        this.observe(message.epoch);
        this.events.push({ type: "turn", turnId: message.turnId, epoch: message.epoch, state: message.state });
        if (message.state === "listening") this.events.push({ type: "playbackStop", epoch: message.epoch }); // §8.4
        break;
      case "text":
        this.events.push({ type: "text", text: message.text, turnId: message.turnId });
        break;
      case "transcript":
        this.events.push({
          type: "transcript",
          role: message.role,
          text: message.text,
          final: message.final,
          itemId: message.itemId,
          turnId: message.turnId,
        });
        break;
      case "interrupted":
        this.closeEpoch(message.epoch, false, now);
        break;
      case "tool.call.delta":
        if (!this.isClosed(message.epoch)) {
          // §6.2: SHOULD discard previews of a closed epoch.
          const { callId, turnId, epoch, preview } = message;
          this.events.push({ type: "toolPreview", callId, turnId, epoch, preview });
        }
        break;
      case "tool.stream":
        this.toolStream(message);
        break;
      case "error":
        this.error(message);
        break;
      default:
        break;
    }
  }

  private observe(epoch: number): void {
    if (epoch > this.observedEpoch) this.observedEpoch = epoch;
  }

  private isClosed(epoch: number): boolean {
    return this.closedEpoch !== null && epoch <= this.closedEpoch;
  }

  private audioStart(start: AudioStart): void {
    this.observe(start.epoch);
    const item = this.items.get(start.itemId) ?? { id: start.itemId, epoch: start.epoch, receivedMs: 0 };
    this.items.set(item.id, item);
    while (this.items.size > 64) this.items.delete(this.items.keys().next().value!);
    this.item = item;
    if (!this.isClosed(start.epoch)) {
      this.events.push({ type: "audioStart", itemId: start.itemId, turnId: start.turnId, epoch: start.epoch });
    }
  }

  /** Milliseconds of audio in one output payload, in the session's output format. */
  duration(payload: Uint8Array): number {
    const format = this.output;
    if (format === null || format.encoding === "opus") return 20;
    if (format.encoding === "pcmu") return payload.length / 8;
    return (payload.length * 500) / formatRate(format);
  }

  // -- internals: the epoch gate and tools (§6.2, §7) --

  private closeEpoch(epoch: number, local: boolean, now: number): void {
    if (this.closedEpoch !== null && epoch <= this.closedEpoch) return; // already closed: no effect
    this.closedEpoch = epoch;
    this.events.push({ type: "playbackStop", epoch });
    const running = this.running;
    if (running !== null && this.isClosed(running.epoch)) {
      // §7.2: answer at once; the tool's later outcome is discarded, and the next call
      // need not wait for it.
      this.running = null;
      this.events.push({ type: "toolCancel", callId: running.callId });
      this.answerInterrupted(running, now);
    }
    const kept: ToolCall[] = [];
    for (const call of this.queue) {
      if (this.isClosed(call.epoch)) this.answerInterrupted(call, now);
      else kept.push(call);
    }
    this.queue = kept;
    this.nextCall(now);
    if (local && this.capabilities.includes(TOOL_STREAM)) {
      // §7.5: unterminated calls of the closed epoch count as cancelled at once.
      for (const [callId, entry] of this.streams) {
        if (!TERMINAL.has(entry.phase) && this.isClosed(entry.message.epoch)) {
          entry.phase = "cancelled";
          const { name, turnId, epoch: callEpoch } = entry.message;
          this.events.push({ type: "toolStream", callId, name, turnId, epoch: callEpoch, phase: "cancelled", message: null });
        }
      }
    }
    this.events.push({ type: "interrupted", epoch, local });
  }

  private toolCall(call: ToolCall, now: number): void {
    if (this.answered.has(call.callId) || this.running?.callId === call.callId) return;
    if (this.isClosed(call.epoch)) {
      this.answerInterrupted(call, now); // §6.2: never start a call of a closed epoch
      return;
    }
    this.queue.push(call);
    this.nextCall(now);
  }

  private nextCall(now: number): void {
    while (this.running === null && this.queue.length > 0) {
      const call = this.queue.shift()!;
      if (this.isClosed(call.epoch)) {
        this.answerInterrupted(call, now);
        continue;
      }
      if (!this.tools.has(call.name)) {
        this.answer(call, { ok: false, code: "FAILED", message: `no tool named ${JSON.stringify(call.name)}` }, now);
        continue;
      }
      this.running = call;
      const { callId, name, arguments: args, turnId, epoch } = call;
      this.events.push({ type: "toolCall", callId, name, arguments: args, turnId, epoch });
    }
  }

  private toolStream(message: ToolStream): void {
    const previous = this.streams.get(message.callId);
    if (previous !== undefined && TERMINAL.has(previous.phase)) return; // nothing after a terminal phase
    if (this.isClosed(message.epoch)) return; // §7.5: SHOULD discard closed epochs
    this.streams.delete(message.callId);
    this.streams.set(message.callId, { phase: message.phase, message });
    if (this.streams.size > 256) this.streams.delete(this.streams.keys().next().value!);
    const { callId, name, turnId, epoch, phase } = message;
    this.events.push({ type: "toolStream", callId, name, turnId, epoch, phase, message });
  }
}
