/**
 * The client role, sans I/O: a {@link ClientSession} across its connections (§5.1).
 *
 * A driver calls {@link ClientSession.connectionMade} when a WebSocket opens, feeds it
 * the frames it receives with the time, writes out {@link ClientSession.takeOutbox} and
 * hands {@link ClientSession.takeEvents} to the application. The session keeps the
 * epoch gate (§6.2): tool calls of a closed epoch never start, output audio of a closed
 * epoch is never delivered. Calls run one at a time in the order received (§7.1): the
 * session emits `toolCall` for the next call once the previous one has its result, and
 * the driver answers with {@link ClientSession.toolFinished}.
 *
 * Like the Python `vrt.protocol.client.ClientSession`, it walks the rows of §5.1's
 * client table: every input (a frame, a timer, a call of the driver or the application)
 * is classified, its row looked up in `CLIENT_TABLE` for the current state, and the
 * row's action performed (one method per action, {@link ClientSession.actions}); the
 * table is generated from vrt's own (`vrt.protocol.tables`) when the package is built.
 * Times are milliseconds.
 */

import { decodeServer, DEFAULT_LIMITS, encode, type Decoded, type Limits } from "./codec.js";
import type { VrtEvent } from "./events.js";
import { buildFrame, INPUT, parseFrame } from "./frames.js";
import {
  CAPABILITY,
  CLIENT_TABLE,
  CLOSE,
  DEAD_AFTER_INTERVALS,
  DEFAULT_MAX_KEPT,
  PING_INTERVAL_MS,
  TERMINAL_PHASES,
  type ClientAction,
  type ClientInput,
  type ClientState,
  type ErrorCode,
} from "./gen/protocol.js";
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
import { IncomingStream, OutgoingStream } from "./streams.js";

export { DEAD_AFTER_INTERVALS, PING_INTERVAL_MS };

/** §5.1 "Client state": connecting, waiting (for ready), open, closed. */
export type SessionState = ClientState;

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

/** An error to report: an `error` message, or an invalid message (§9.1). */
type Reported = Pick<ErrorMessage, "code" | "message" | "recoverable">;

type Outcome = { ok: true; output: unknown } | { ok: false; code: FailureCode; message: string | null };

/** The error codes that end the session when not recoverable (the input's own words). */
const SESSION_ENDING: readonly ErrorCode[] = ["AGENT_ERROR", "SERVER_SHUTDOWN"];

/** Which row of the client table an `error` is. */
function errorInput(error: ErrorMessage): ClientInput {
  if (error.code === "RESUME_FAILED") return "RESUME_FAILED";
  if (error.code === "UNAUTHORIZED") return "UNAUTHORIZED";
  if (!error.recoverable) {
    // §9.2: "the session or connection cannot continue". These two say it is the
    // session; for the others (RATE_LIMITED, ...) a resume tells.
    return (SESSION_ENDING as readonly string[]).includes(error.code) ? "SESSION_ENDED" : "ERROR_NOT_RECOVERABLE";
  }
  return "ERROR";
}

const isTerminal = (phase: string): boolean => (TERMINAL_PHASES as readonly string[]).includes(phase);

export class ClientSession {
  state: SessionState = "connecting";
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
    this.perform("CONNECTION_OPENED", null, now);
  }

  connectionLost(now: number = this.lastReceived): void {
    this.perform("CONNECTION_LOST", null, now);
  }

  receiveText(data: string, now: number): void {
    this.lastReceived = now;
    const decoded = decodeServer(data, this.limits);
    if (!decoded.ok) {
      // §9.1: a client reports an invalid message and continues.
      this.perform("INVALID", { code: decoded.code, message: decoded.reason, recoverable: true }, now);
      return;
    }
    const message = decoded.message;
    if (decoded.seq !== 0) {
      this.perform("SEQUENCED", decoded, now);
    } else if (message.type === "ready") {
      this.classifyReady(message, now);
    } else if (message.type === "audio.start") {
      this.perform("AUDIO_START", message, now);
    } else if (message.type === "ack") {
      this.perform("ACK", message.upTo, now);
    } else if (message.type === "error") {
      this.perform(errorInput(message), message, now); // seq 0: no session bound to the connection
    } else if (message.type === "pong") {
      if (this.pingSentAt !== null) {
        this.rttMs = now - this.pingSentAt;
        this.pingSentAt = null;
      }
      this.perform("PONG", null, now);
    }
  }

  receiveBinary(data: ArrayBuffer | Uint8Array, now: number): void {
    this.lastReceived = now;
    this.perform("OUTPUT_AUDIO", data, now);
  }

  /** When {@link onTimer} must next run, or null when no timer is needed. */
  timerDeadline(): number | null {
    if (this.state === "connecting" || this.state === "closed") return null;
    let deadline = Math.min(
      this.lastSent + this.pingIntervalMs,
      this.lastReceived + DEAD_AFTER_INTERVALS * this.pingIntervalMs,
    );
    const ack = this.incoming.ackDeadline();
    if (ack !== null && this.state === "open") deadline = Math.min(deadline, ack);
    return deadline;
  }

  onTimer(now: number): void {
    if (this.state === "connecting" || this.state === "closed") return;
    if (now >= this.lastReceived + DEAD_AFTER_INTERVALS * this.pingIntervalMs) {
      this.perform("SILENT", null, now);
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
    if (this.state === "connecting" || this.state === "closed") return;
    this.pingSentAt ??= now;
    this.write(encode({ type: "ping" }, 0), now);
  }

  // -- application actions --

  /** User text input (§6.3). */
  sendText(text: string, now: number): void {
    this.perform("SEND", { type: "text", text }, now);
  }

  /** Replace the application context; null clears it (§5.5). */
  updateContext(context: unknown, now: number): void {
    this.perform("SEND", { type: "context", context }, now);
  }

  /** The user interrupted: close the observed epoch locally at once, then tell the server (§6.2). */
  interrupt(reason: InterruptReason, now: number): number {
    const epoch = this.observedEpoch;
    this.closeEpoch(epoch, true, now);
    this.perform("SEND", { type: "interrupt", epoch, reason }, now);
    return epoch;
  }

  /** Report how much of an item was played (§8.4), never more than was received. */
  playback(itemId: string, playedMs: number, now: number): number {
    const limit = this.items.get(itemId)?.receivedMs ?? 0;
    const played = Math.max(0, Math.floor(Math.min(playedMs, limit)));
    this.perform("SEND", { type: "playback", itemId, playedMs: played }, now);
    return played;
  }

  /** One input audio frame; false (dropped) when no connection is open (§5.1, §5.4). */
  sendAudio(payload: Uint8Array, now: number): boolean {
    const sent = this.state === "open";
    this.perform("SEND_AUDIO", payload, now);
    return sent;
  }

  /**
   * The running call ended. Sends its result unless it was already answered
   * (interrupted), then starts the next call. False when the outcome is discarded.
   */
  toolFinished(callId: string, outcome: Outcome, now: number): boolean {
    const running = this.running;
    if (running === null || running.callId !== callId) return false;
    this.running = null;
    const sent = this.answer(running, outcome, now);
    this.nextCall(now);
    return sent;
  }

  /** The driver gives up on the session (no connection for too long): it is over. */
  fail(code: string, message: string): void {
    if (this.state === "closed") return;
    this.state = "closed";
    this.queue = [];
    this.events.push({ type: "sessionFailed", code, message });
  }

  // -- the table --

  /** Perform the row of §5.1's client table for `input` in the current state. */
  private perform(input: ClientInput, argument: unknown, now: number): void {
    const row = CLIENT_TABLE[this.state][input];
    if (row === undefined) throw new Error(`${input} is not possible in state ${this.state} (§5.1)`);
    const [action, next] = row;
    ClientSession.actions[action](this, argument, now);
    if (next !== null) this.state = next;
  }

  /** What performs each action of the table. */
  private static readonly actions: {
    readonly [A in ClientAction]: (session: ClientSession, argument: any, now: number) => void;
  } = {
    SEND_HELLO: (s, _argument: null, now) => s.sendHello(now),
    OPEN: (s, opened: { ready: Ready; resend: string[] }, now) => s.open(opened.ready, opened.resend, now),
    REPORT: (s, error: Reported) => s.report(error),
    REPORT_AND_STOP: (s, error: ErrorMessage) => s.stop(error.code, error.message),
    AWAIT_CREDENTIAL: (s, error: ErrorMessage) => s.awaitCredential(error),
    STOP: (s, error: ErrorMessage) => s.stop(error.code, error.message),
    ABANDON: (s, reason: string) => s.abandon(reason),
    HANDLE: (s, decoded: Decoded, now) => s.handle(decoded, now),
    ANNOUNCE: (s, start: AudioStart) => s.audioStart(start),
    PLAY: (s, data: ArrayBuffer | Uint8Array) => s.play(data),
    APPLY_ACK: (s, upTo: number) => s.outgoing.ack(upTo),
    IGNORE: () => {},
    RECONNECT: (s) => s.forgetConnection(),
    CLOSE_DEAD: (s) => s.closeDead(),
    KEEP: (s, message: ClientMessage) => void s.outgoing.send(message), // sent after the next ready (§5.1)
    WRITE: (s, sent: ClientMessage | Uint8Array, now) => s.writeNow(sent, now),
    DROP: () => {}, // audio is never sent before ready, nor resent (§5.1, §5.4)
    REFUSE: () => {
      throw new Error("the session is closed (§5.4); start a new client");
    },
  };

  // -- actions --

  private sendHello(now: number): void {
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
    this.write(encode(hello, 0), now);
  }

  private open(ready: Ready, resend: string[], now: number): void {
    this.sessionId = ready.sessionId;
    this.input = ready.input;
    this.output = ready.output;
    this.capabilities = ready.capabilities ?? [];
    for (const data of resend) this.write(data, now); // §5.4: in order, before anything new
    this.events.push({
      type: "connected",
      sessionId: ready.sessionId,
      resumed: ready.resumedFrom !== undefined,
      input: ready.input,
      output: ready.output,
      capabilities: this.capabilities,
    });
  }

  private report(error: Reported): void {
    this.events.push({ type: "error", code: error.code, message: error.message, recoverable: error.recoverable });
  }

  /** §5.4: after RESUME_FAILED (or another error that ends the session) nothing old is ever resent. */
  private stop(code: string, message: string): void {
    this.queue = [];
    this.events.push({ type: "sessionFailed", code, message });
  }

  /** §5.4: the resume failed on this side: close the connection, report RESUME_FAILED. */
  private abandon(reason: string): void {
    this.outbox.push({ kind: "close", code: CLOSE.NORMAL, reason: "resume failed" });
    this.stop("RESUME_FAILED", reason);
  }

  private awaitCredential(error: ErrorMessage): void {
    // §5.3: do not retry the same credential; a fresh one may be tried.
    this.authRefused = true;
    this.events.push({ type: "sessionFailed", code: error.code, message: error.message });
  }

  private handle(decoded: Decoded, now: number): void {
    if (!this.incoming.receive(decoded.seq, now)) return; // §4.3: a duplicate, acknowledged again
    this.events.push({ type: "message", seq: decoded.seq, message: decoded.message });
    this.handleSequenced(decoded.message, now);
  }

  private play(data: ArrayBuffer | Uint8Array): void {
    const frame = parseFrame(data, "client");
    if (frame === null) return; // §8.1: a client drops a malformed frame
    const item = this.item;
    // §8.3: frames before any audio.start, and of a closed epoch, are discarded.
    if (item === null || this.isClosed(item.epoch)) return;
    item.receivedMs += this.duration(frame.payload);
    this.events.push({ type: "audio", itemId: item.id, seq: frame.seq, payload: frame.payload });
  }

  private forgetConnection(): void {
    this.pingSentAt = null;
    this.item = null; // §8.3: a resumed connection starts without a current item
  }

  private closeDead(): void {
    // §4.4: treat the connection as dead, close it and resume.
    this.outbox.push({ kind: "close", code: CLOSE.REPLACED, reason: "no frame from the server" });
    this.forgetConnection();
  }

  private writeNow(sent: ClientMessage | Uint8Array, now: number): void {
    if (!(sent instanceof Uint8Array)) {
      this.write(this.outgoing.send(sent), now);
      return;
    }
    const seq = this.audioSeq; // §8.1: input audio
    this.audioSeq = (seq + 1) % 4294967296;
    this.outbox.push({ kind: "binary", data: buildFrame(INPUT, seq, sent) });
    this.lastSent = now;
  }

  // -- internals: sending --

  private write(data: string, now: number): void {
    this.outbox.push({ kind: "text", data });
    this.lastSent = now;
  }

  /** §7.2: exactly one tool.result per call. */
  private answer(call: ToolCall, outcome: Outcome, now: number): boolean {
    if (this.answered.has(call.callId)) return false;
    this.answered.add(call.callId);
    const base = { type: "tool.result", callId: call.callId, epoch: call.epoch } as const;
    const result: ClientMessage = outcome.ok
      ? { ...base, ok: true, output: outcome.output === undefined ? null : outcome.output }
      : { ...base, ok: false, code: outcome.code, message: outcome.message };
    if (this.state !== "closed") this.perform("SEND", result, now);
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

  private classifyReady(ready: Ready, now: number): void {
    if (this.state !== "waiting") {
      this.perform("READY", null, now);
      return;
    }
    const resumed = ready.resumedFrom !== undefined;
    if (resumed !== (this.sessionId !== null) || (this.sessionId !== null && ready.sessionId !== this.sessionId)) {
      this.perform("READY_MISMATCH", "ready does not match the session resumed", now);
      return;
    }
    const resend = this.outgoing.resendAfter(ready.resumedFrom ?? 0);
    if (resend === null) {
      // §5.4: the client cannot resend what the server lacks.
      this.perform("CANNOT_RESEND", "cannot resend what the server missed (§5.4)", now);
      return;
    }
    this.perform("READY", { ready, resend }, now);
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
        this.perform(errorInput(message), message, now); // a sequenced error: a session is bound
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
    if (local && this.capabilities.includes(CAPABILITY.TOOL_STREAM_V1)) {
      // §7.5: unterminated calls of the closed epoch count as cancelled at once.
      for (const [callId, entry] of this.streams) {
        if (!isTerminal(entry.phase) && this.isClosed(entry.message.epoch)) {
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
    if (previous !== undefined && isTerminal(previous.phase)) return; // nothing after a terminal phase
    if (this.isClosed(message.epoch)) return; // §7.5: SHOULD discard closed epochs
    this.streams.delete(message.callId);
    this.streams.set(message.callId, { phase: message.phase, message });
    if (this.streams.size > 256) this.streams.delete(this.streams.keys().next().value!);
    const { callId, name, turnId, epoch, phase } = message;
    this.events.push({ type: "toolStream", callId, name, turnId, epoch, phase, message });
  }
}
