/**
 * The browser vRT client: one session across as many WebSockets as it takes.
 *
 *     const client = new VrtClient("wss://agent.example/v1", { validator: jsonSchema });
 *     client.tool("add", { parameters }, async ({ a, b }) => a + b);
 *     client.addEventListener("text", (e) => console.log(e.detail.text));
 *     await client.connect();
 *     client.sendText("hello");
 *
 * The protocol lives in the sans-I/O {@link ClientSession}; this module moves frames
 * between it and a WebSocket, runs the tools it asks for, keeps its timers, and
 * reconnects after a lost connection with exponential backoff, jitter and a give-up
 * time (§5.1, §5.4), as the Python `vrt.client.VrtClient` does.
 */

import type { VrtEvent, VrtEventMap, VrtEventName, VrtEventOf } from "./events.js";
import { CLOSE } from "./gen/protocol.js";
import type { FailureCode, Format, InterruptReason } from "./messages.js";
import { ClientSession, type Output, type SessionEvent } from "./session.js";
import { registerTool, ToolError, type RegisteredTool, type SchemaValidator, type ToolHandler, type ToolOptions } from "./tools.js";
import type { Limits } from "./codec.js";

/** The time source and timers; tests pass a fake one. Milliseconds. */
export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The part of the WebSocket API the client uses; tests pass a fake one. */
export interface SocketLike {
  binaryType: string;
  readonly bufferedAmount: number;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
}

export type SocketFactory = (url: string) => SocketLike;

export type Credential = string | Record<string, unknown>;

export interface ClientOptions {
  /** Sent in `hello.auth`, never in the URL (§5.3). */
  auth?: Credential;
  /** Called after UNAUTHORIZED; return a new credential to retry with, or null to stop. */
  freshCredential?: () => Promise<Credential | null>;
  /** Capabilities to offer (§3.3), e.g. `["tool-stream-v1"]`. */
  capabilities?: string[];
  /** Initial application context (§5.5). */
  context?: unknown;
  /** Preferred audio formats (§8.2); `vrealtime/audio` has `preferredFormats()`. */
  input?: Format;
  output?: Format;
  /** Ping after this much silence; a connection silent 2.5 times as long is dead (§4.4). Default 15000. */
  pingIntervalMs?: number;
  /** Resume after a lost connection (default true). */
  reconnect?: boolean;
  /** First reconnection delay (default 100 ms), doubled per failed attempt up to backoffMaxMs (5000). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Stop resuming once the session has had no connection for this long (default 60000): `sessionFailed` GAVE_UP. */
  giveUpAfterMs?: number;
  /** A connection that has not got its `ready` after this long is dropped and retried (default 10000). */
  openTimeoutMs?: number;
  /** Checks tool arguments against their declared parameters (§7.1); see `vrealtime/json-schema`. */
  validator?: SchemaValidator;
  /** Unacknowledged messages kept for resends (§11, default 1024). */
  maxKept?: number;
  /** Output audio frames are dropped while the socket has more than this buffered (default 64 KiB). */
  maxBufferedAudio?: number;
  limits?: Limits;
  /** For tests and non-browser hosts. */
  socket?: SocketFactory;
  clock?: Clock;
  random?: () => number;
}

/** The session could not be opened or cannot continue. */
export class VrtError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
    this.name = "VrtError";
  }
}

const CLOSE_WAIT_MS = 2000;

const defaultClock: Clock = {
  now: () => performance.now(),
  setTimeout: (callback, ms) => globalThis.setTimeout(callback, ms),
  clearTimeout: (handle) => globalThis.clearTimeout(handle as ReturnType<typeof setTimeout>),
};

interface Subscriber {
  queue: VrtEvent[];
  wake: (() => void) | null;
  done: boolean;
}

interface RunningTool {
  controller: AbortController;
}

export interface VrtClient {
  addEventListener<K extends VrtEventName>(
    type: K,
    listener: (event: CustomEvent<VrtEventMap[K]>) => void,
    options?: boolean | AddEventListenerOptions,
  ): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | AddEventListenerOptions): void;
  removeEventListener<K extends VrtEventName>(
    type: K,
    listener: (event: CustomEvent<VrtEventMap[K]>) => void,
    options?: boolean | EventListenerOptions,
  ): void;
  removeEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | EventListenerOptions): void;
}

export class VrtClient extends EventTarget {
  readonly url: string;
  /** The protocol state; read it, never drive it. */
  session!: ClientSession;
  /** Connections opened, and resumes that got their `ready`. */
  readonly stats = { connections: 0, resumes: 0 };

  private readonly options: ClientOptions;
  private readonly clock: Clock;
  private readonly tools = new Map<string, RegisteredTool>();
  private readonly running = new Map<string, RunningTool>();
  private readonly subscribers = new Set<Subscriber>();
  private ws: SocketLike | null = null;
  private timer: unknown = null;
  private timerAt = Infinity;
  private reconnectTimer: unknown = null;
  private openTimer: unknown = null;
  private started = false;
  private closing = false;
  private stopped = false;
  private opened = false;
  private attempt = 0;
  private lostAt: number | null = null;
  private flushing = false;
  private readyWaiters: Array<{ resolve: (v: VrtEventMap["connected"]) => void; reject: (e: Error) => void }> = [];

  constructor(url: string, options: ClientOptions = {}) {
    super();
    this.url = url;
    this.options = options;
    this.clock = options.clock ?? defaultClock;
  }

  /** Declare a tool (§7); before {@link connect}: tools are fixed when the session opens. */
  tool<A = any>(name: string, options: ToolOptions, handler: ToolHandler<A>): this {
    if (this.started) throw new Error("declare tools before connect(): they are fixed when the session opens (§5.4)");
    if (this.tools.has(name)) throw new Error(`tool ${name} is declared twice (§5.2)`);
    if (options.parameters !== undefined && this.options.validator === undefined) {
      console.warn(`vrealtime: tool ${name} declares parameters but the client has no validator; arguments are not checked (§7.1)`);
    }
    this.tools.set(name, registerTool(name, options, handler as ToolHandler, this.options.validator));
    return this;
  }

  /** Open the session; resolves once `ready` arrived, rejects with {@link VrtError} if refused. */
  connect(): Promise<VrtEventMap["connected"]> {
    if (this.started) throw new Error("already connected");
    this.started = true;
    const o = this.options;
    this.session = new ClientSession({
      tools: [...this.tools.values()].map((t) => t.declaration),
      ...(o.input ? { input: o.input } : {}),
      ...(o.output ? { output: o.output } : {}),
      ...(o.capabilities ? { capabilities: o.capabilities } : {}),
      ...(o.context !== undefined ? { context: o.context } : {}),
      ...(o.auth !== undefined ? { auth: o.auth } : {}),
      ...(o.maxKept !== undefined ? { maxKept: o.maxKept } : {}),
      ...(o.pingIntervalMs !== undefined ? { pingIntervalMs: o.pingIntervalMs } : {}),
      ...(o.limits !== undefined ? { limits: o.limits } : {}),
    });
    const ready = new Promise<VrtEventMap["connected"]>((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
    this.open();
    return ready;
  }

  /** Close the connection (1000); the session is not resumed after this. */
  close(): Promise<void> {
    this.closing = true;
    const ws = this.ws;
    for (const { controller } of this.running.values()) controller.abort(new ToolError("INTERRUPTED", "the client closed"));
    this.running.clear();
    this.cancelTimers();
    this.stop("closed by the application");
    if (ws === null) return Promise.resolve();
    return new Promise((resolve) => {
      const done = this.clock.setTimeout(resolve, CLOSE_WAIT_MS);
      ws.onclose = () => {
        this.clock.clearTimeout(done);
        resolve();
      };
      ws.onmessage = null;
      this.ws = null;
      ws.close(CLOSE.NORMAL, "client done");
    });
  }

  get sessionId(): string | null {
    return this.session?.sessionId ?? null;
  }

  /** Whether a connection is open (its `ready` arrived). */
  get connected(): boolean {
    return this.session?.state === "open";
  }

  // -- actions --

  /** User text input; interrupts a response in flight on the server (§6.3). */
  sendText(text: string): void {
    this.act((now) => this.session.sendText(text, now));
  }

  /** Replace the application context (§5.5); null clears it. */
  updateContext(context: unknown): void {
    this.act((now) => this.session.updateContext(context, now));
  }

  /** Interrupt the agent now (§6.2): the epoch closes locally before anything is sent. Returns it. */
  interrupt(reason: InterruptReason = "user"): number {
    let epoch = 0;
    this.act((now) => (epoch = this.session.interrupt(reason, now)));
    return epoch;
  }

  /** Report how much of an audio item the user heard (§8.4); capped at what was received. */
  playback(itemId: string, playedMs: number): number {
    let played = 0;
    this.act((now) => (played = this.session.playback(itemId, playedMs, now)));
    return played;
  }

  /** One input audio frame in the session's input format; false (dropped) while not connected or congested. */
  sendAudio(payload: Uint8Array): boolean {
    const ws = this.ws;
    if (ws === null || ws.bufferedAmount > (this.options.maxBufferedAudio ?? 65536)) return false;
    let sent = false;
    this.act((now) => (sent = this.session.sendAudio(payload, now)));
    return sent;
  }

  /** Send a ping now (§4.4); {@link rttMs} is updated when its pong arrives. */
  ping(): void {
    this.act((now) => this.session.ping(now));
  }

  /** The round trip of the last answered ping, in milliseconds; null before any. */
  get rttMs(): number | null {
    return this.session?.rttMs ?? null;
  }

  // -- events --

  /** Every event from now on, in order, until the client stops (the last is `closed`). */
  events(): AsyncIterableIterator<VrtEvent> {
    const subscriber: Subscriber = { queue: [], wake: null, done: false };
    if (!this.stopped) this.subscribers.add(subscriber);
    else subscriber.done = true;
    const iterator: AsyncIterableIterator<VrtEvent> = {
      next: async () => {
        for (;;) {
          const event = subscriber.queue.shift();
          if (event !== undefined) return { value: event, done: false };
          if (subscriber.done) return { value: undefined, done: true };
          await new Promise<void>((resolve) => (subscriber.wake = resolve));
        }
      },
      return: async () => {
        subscriber.done = true;
        this.subscribers.delete(subscriber);
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<VrtEvent> {
    return this.events();
  }

  // -- internals: connections --

  private open(): void {
    this.reconnectTimer = null;
    if (this.closing) return;
    let ws: SocketLike;
    try {
      ws = this.options.socket ? this.options.socket(this.url) : (new WebSocket(this.url) as unknown as SocketLike);
    } catch (error) {
      this.stop(`cannot connect to ${this.url}: ${String(error)}`, "CLOSED");
      return;
    }
    this.ws = ws;
    this.opened = false;
    this.stats.connections++;
    // A connect that hangs (no answer to the TCP handshake) would otherwise never end.
    this.openTimer = this.clock.setTimeout(() => {
      this.openTimer = null;
      if (this.ws !== ws || this.opened) return;
      ws.close(CLOSE.NORMAL, "no ready in time");
      this.lost(null, "no ready in time");
    }, this.options.openTimeoutMs ?? 10_000);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.session.connectionMade(this.clock.now());
      this.flush();
    };
    ws.onmessage = (event) => {
      if (this.ws !== ws) return;
      const now = this.clock.now();
      const data = event.data;
      if (typeof data === "string") {
        this.session.receiveText(data, now);
      } else if (data instanceof ArrayBuffer || data instanceof Uint8Array) {
        this.session.receiveBinary(data, now);
      }
      this.flush();
    };
    ws.onclose = (event) => {
      if (this.ws !== ws) return;
      this.lost(event.code || null, event.reason || "connection lost");
    };
    ws.onerror = () => {}; // a close event follows
  }

  private lost(code: number | null, reason: string): void {
    if (this.openTimer !== null) this.clock.clearTimeout(this.openTimer);
    this.openTimer = null;
    if (this.ws !== null) this.detach(this.ws);
    this.session.connectionLost();
    this.flush();
    if (this.closing) return;
    const session = this.session;
    if (session.authRefused) {
      void this.retryCredential();
      return;
    }
    if (!((this.options.reconnect ?? true) && session.resumable)) {
      if (session.state === "closed") this.stop("the session failed");
      else this.stop(`connection closed (${code ?? "no code"}: ${reason})`, "CLOSED");
      return;
    }
    const now = this.clock.now();
    this.lostAt ??= now;
    if (now - this.lostAt >= (this.options.giveUpAfterMs ?? 60_000)) {
      session.fail("GAVE_UP", `no connection for ${Math.round((now - this.lostAt) / 1000)} s`);
      this.flush();
      this.stop("gave up resuming");
      return;
    }
    this.emit({ type: "disconnected", code, reason, resuming: true });
    // Exponential backoff with jitter, restarting once a connection got its ready.
    this.attempt = this.opened ? 0 : this.attempt + 1;
    const initial = this.options.backoffInitialMs ?? 100;
    const delay = Math.min(this.options.backoffMaxMs ?? 5000, initial * 2 ** Math.max(0, this.attempt - 1));
    const jittered = delay * (0.5 + 0.5 * (this.options.random ?? Math.random)());
    this.reconnectTimer = this.clock.setTimeout(() => this.open(), jittered);
  }

  /** Nothing more from this socket reaches the session; it is no longer the connection. */
  private detach(ws: SocketLike): void {
    ws.onopen = ws.onmessage = ws.onerror = null;
    ws.onclose = () => {};
    if (this.ws === ws) this.ws = null;
  }

  private async retryCredential(): Promise<void> {
    const fresh = this.options.freshCredential ? await this.options.freshCredential() : null;
    if (fresh === null || this.closing) {
      this.stop("the server refused the credential (UNAUTHORIZED)", "UNAUTHORIZED");
      return;
    }
    this.session.auth = fresh;
    this.open();
  }

  private stop(reason: string, code?: string): void {
    this.closing = true;
    this.cancelTimers();
    const error = new VrtError(code ?? "CLOSED", reason);
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(error);
    if (!this.stopped) {
      this.stopped = true;
      this.emit({ type: "closed", reason });
      for (const subscriber of this.subscribers) {
        subscriber.done = true;
        subscriber.wake?.();
      }
      this.subscribers.clear();
    }
  }

  private cancelTimers(): void {
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    if (this.reconnectTimer !== null) this.clock.clearTimeout(this.reconnectTimer);
    if (this.openTimer !== null) this.clock.clearTimeout(this.openTimer);
    this.timer = this.reconnectTimer = this.openTimer = null;
    this.timerAt = Infinity;
  }

  // -- internals: frames, events, timers --

  private act(action: (now: number) => void): void {
    if (!this.started) throw new Error("connect() first");
    action(this.clock.now());
    this.flush();
  }

  /** Write what the session has for the wire and hand its events out, until both are
   * empty; then, if the session closed the connection, go on from the loss. */
  private flush(): void {
    if (this.flushing) return; // the outer call's loop picks up what a handler caused
    this.flushing = true;
    let closed: { code: number; reason: string } | null = null;
    try {
      for (;;) {
        const outbox = this.session.takeOutbox();
        const events = this.session.takeEvents();
        if (outbox.length === 0 && events.length === 0) break;
        for (const item of outbox) closed = this.write(item) ?? closed;
        for (const event of events) this.handle(event);
      }
    } finally {
      this.flushing = false;
    }
    // After the events that came with the close (sessionFailed before closed, §5.4).
    if (closed !== null) this.lost(closed.code, closed.reason);
    this.arm();
  }

  /** Put one output on the wire; a close is returned, for {@link flush} to act on. */
  private write(item: Output): { code: number; reason: string } | null {
    const ws = this.ws;
    if (ws === null) return null;
    if (item.kind === "close") {
      // §4.4: a dead connection gets its close frame (4000) but no wait for an answer
      // that will not come: the resume starts at once.
      this.detach(ws);
      ws.close(item.code, item.reason);
      return item;
    }
    try {
      ws.send(item.data);
    } catch {
      // The socket is closing; its close event follows, and the session resends (§5.4).
    }
    return null;
  }

  private handle(event: SessionEvent): void {
    switch (event.type) {
      case "toolCancel": {
        const running = this.running.get(event.callId);
        this.running.delete(event.callId);
        running?.controller.abort(new ToolError("INTERRUPTED", "the turn was interrupted"));
        return;
      }
      case "toolCall":
        this.startTool(event); // emits it if the tool runs
        return;
      case "connected":
        this.opened = true;
        if (this.openTimer !== null) this.clock.clearTimeout(this.openTimer);
        this.openTimer = null;
        this.lostAt = null;
        if (event.resumed) this.stats.resumes++;
        for (const waiter of this.readyWaiters.splice(0)) waiter.resolve(event);
        break;
      case "sessionFailed": {
        const retrying = event.code === "UNAUTHORIZED" && this.options.freshCredential !== undefined;
        if (!retrying) {
          const error = new VrtError(event.code, event.message);
          for (const waiter of this.readyWaiters.splice(0)) waiter.reject(error);
        }
        break;
      }
      default:
        break;
    }
    this.emit(event);
  }

  private emit(event: VrtEvent): void {
    for (const subscriber of this.subscribers) {
      subscriber.queue.push(event);
      const wake = subscriber.wake;
      subscriber.wake = null;
      wake?.();
    }
    const { type, ...detail } = event;
    try {
      this.dispatchEvent(new CustomEvent(type, { detail }));
    } catch (error) {
      console.error("vrealtime: an event listener threw", error);
    }
  }

  private arm(): void {
    if (this.stopped) return;
    const deadline = this.session.timerDeadline();
    if (deadline === null) {
      if (this.timer !== null) this.clock.clearTimeout(this.timer);
      this.timer = null;
      this.timerAt = Infinity;
      return;
    }
    if (this.timer !== null && this.timerAt <= deadline) return; // fires first; re-arms then
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timerAt = deadline;
    this.timer = this.clock.setTimeout(() => {
      this.timer = null;
      this.timerAt = Infinity;
      this.session.onTimer(this.clock.now());
      this.flush();
    }, Math.max(0, deadline - this.clock.now()));
  }

  // -- internals: tools --

  /** Run a call the session started: `toolCall` goes out just before the tool runs,
   * and not for a call whose arguments do not match its parameters (§7.1): that one is
   * answered INVALID and never runs. */
  private startTool(call: VrtEventOf<"toolCall">): void {
    const tool = this.tools.get(call.name)!;
    const controller = new AbortController();
    this.running.set(call.callId, { controller });
    const finish = (outcome: { ok: true; output: unknown } | { ok: false; code: FailureCode; message: string | null }) => {
      if (controller.signal.aborted || this.running.get(call.callId)?.controller !== controller) return;
      this.running.delete(call.callId);
      if (this.stopped) return;
      this.session.toolFinished(call.callId, outcome, this.clock.now());
      this.flush();
    };
    const problem = tool.check?.(call.arguments) ?? null;
    if (problem !== null) {
      // §7.1: arguments that do not match the declared parameters never reach the tool.
      queueMicrotask(() => finish({ ok: false, code: "INVALID", message: problem }));
      return;
    }
    this.emit(call);
    const context = { signal: controller.signal, callId: call.callId, turnId: call.turnId, epoch: call.epoch };
    let result: unknown;
    try {
      result = tool.handler(call.arguments, context);
    } catch (error) {
      result = Promise.reject(error);
    }
    Promise.resolve(result).then(
      (output) => finish({ ok: true, output: output === undefined ? null : output }),
      (error: unknown) => {
        if (error instanceof ToolError) finish({ ok: false, code: error.code, message: error.message });
        else finish({ ok: false, code: "FAILED", message: error instanceof Error ? `${error.name}: ${error.message}` : String(error) });
      },
    );
  }
}
