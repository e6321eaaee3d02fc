// Test doubles: a fake clock with timers, and fake WebSockets the client opens.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Clock, SocketLike } from "../src/client.js";

/** The repository root: the folder above that holds capabilities.schema.json. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "capabilities.schema.json"))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error("the vrt repository root was not found above the tests");
    dir = parent;
  }
  return dir;
}

export function readJson(...parts: string[]): any {
  return JSON.parse(readFileSync(join(repoRoot(), ...parts), "utf8"));
}

export function listJson(...parts: string[]): string[] {
  return readdirSync(join(repoRoot(), ...parts)).filter((f) => f.endsWith(".json")).sort();
}

export class FakeClock implements Clock {
  time = 1000;
  private timers: Array<{ at: number; callback: () => void; id: number }> = [];
  private nextId = 1;

  now(): number {
    return this.time;
  }

  setTimeout(callback: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.timers.push({ at: this.time + Math.max(0, ms), callback, id });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t.id !== handle);
  }

  /** Move time forward, running each timer that falls due, in order. */
  advance(ms: number): void {
    const end = this.time + ms;
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at || a.id - b.id);
      const next = this.timers[0];
      if (next === undefined || next.at > end) break;
      this.timers.shift();
      this.time = Math.max(this.time, next.at);
      next.callback();
    }
    this.time = end;
  }

  get pending(): number {
    return this.timers.length;
  }
}

export class FakeSocket implements SocketLike {
  binaryType = "blob";
  bufferedAmount = 0;
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  readonly sent: Array<string | Uint8Array> = [];
  closed: { code?: number; reason?: string } | null = null;

  constructor(readonly url: string) {}

  send(data: string | Uint8Array): void {
    if (this.closed) throw new Error("closed");
    this.sent.push(data);
  }

  close(code?: number, reason?: string): void {
    this.closed = { ...(code !== undefined ? { code } : {}), ...(reason !== undefined ? { reason } : {}) };
  }

  // -- the server's side --

  open(): void {
    this.onopen?.({});
  }

  /** A server message; `seq` and `v` are added. */
  receive(message: Record<string, unknown>, seq = 0): void {
    this.onmessage?.({ data: JSON.stringify({ v: 1, seq, ...message }) });
  }

  receiveRaw(data: string | ArrayBuffer): void {
    this.onmessage?.({ data });
  }

  drop(code = 1006, reason = ""): void {
    this.onclose?.({ code, reason });
  }

  /** The text frames sent, parsed. */
  messages(): any[] {
    return this.sent.filter((d): d is string => typeof d === "string").map((d) => JSON.parse(d));
  }

  sequenced(): any[] {
    return this.messages().filter((m) => m.seq !== 0);
  }

  ready(extra: Record<string, unknown> = {}): void {
    this.receive({ type: "ready", sessionId: "s-1", input: { encoding: "pcm16" }, output: { encoding: "pcm16", sampleRate: 24000 }, ...extra });
  }
}
