// The session state machine through VrtClient, against fake sockets and a fake clock:
// resume (§5.4), acks (§4.2), dedupe (§4.3), heartbeat (§4.4), the epoch gate (§6.2),
// one tool at a time (§7.1), one result per call (§7.2), audio gating (§8.3).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ToolError, VrtClient, type ClientOptions, type VrtEvent } from "../src/index.js";
import { jsonSchema } from "../src/json-schema.js";
import { FakeClock, FakeSocket } from "./helpers.js";

interface Rig {
  client: VrtClient;
  clock: FakeClock;
  sockets: FakeSocket[];
  events: VrtEvent[];
  socket(): FakeSocket;
  connect(): Promise<void>;
}

function rig(options: ClientOptions = {}): Rig {
  const clock = new FakeClock();
  const sockets: FakeSocket[] = [];
  const client = new VrtClient("ws://server.test/", {
    clock,
    random: () => 0,
    socket: (url) => {
      const s = new FakeSocket(url);
      sockets.push(s);
      return s;
    },
    ...options,
  });
  const events: VrtEvent[] = [];
  for (const type of ["connected", "disconnected", "sessionFailed", "closed", "error", "turn", "text", "toolCall", "toolResult", "interrupted", "audio", "audioStart", "playbackStop", "toolStream"]) {
    client.addEventListener(type, (e) => events.push({ type, ...(e as CustomEvent).detail } as VrtEvent));
  }
  const r: Rig = {
    client,
    clock,
    sockets,
    events,
    socket: () => sockets[sockets.length - 1]!,
    connect: async () => {
      const ready = client.connect();
      r.socket().open();
      r.socket().ready();
      await ready;
    },
  };
  return r;
}

const tick = () => new Promise((resolve) => setImmediate(resolve));
const call = (callId: string, epoch: number, name = "record", args: unknown = {}) => ({ type: "tool.call", callId, name, arguments: args, turnId: `t${epoch}`, epoch });
const results = (s: FakeSocket) => s.messages().filter((m) => m.type === "tool.result");

function withTools(r: Rig, log: string[] = []) {
  r.client.tool("record", {}, async (args) => {
    log.push("record");
    return args;
  });
  return log;
}

describe("opening a session", () => {
  it("sends hello first, with the tools, and nothing sequenced before ready (§5.1)", async () => {
    const r = rig({ capabilities: ["tool-stream-v1"], auth: "tok" });
    withTools(r);
    const ready = r.client.connect();
    r.client.sendText("early");
    r.socket().open();
    assert.deepEqual(r.socket().messages(), [
      { v: 1, seq: 0, type: "hello", tools: [{ name: "record" }], capabilities: ["tool-stream-v1"], auth: "tok" },
    ]);
    r.socket().ready();
    await ready;
    assert.deepEqual(r.socket().messages()[1], { v: 1, seq: 1, type: "text", text: "early" });
  });

  it("rejects connect() on a refusal and stops without retrying (§5.3)", async () => {
    const r = rig();
    const ready = r.client.connect();
    r.socket().open();
    r.socket().receive({ type: "error", code: "UNAUTHORIZED", message: "no", recoverable: false });
    r.socket().drop(4401);
    await assert.rejects(ready, /UNAUTHORIZED/);
    r.clock.advance(60_000);
    assert.equal(r.sockets.length, 1);
    assert.equal(r.events.at(-1)?.type, "closed");
  });
});

describe("acknowledgements and duplicates (§4.2, §4.3)", () => {
  it("acks 250 ms after the first unacknowledged message, or at once after 32", async () => {
    const r = rig();
    await r.connect();
    const s = r.socket();
    s.receive({ type: "text", text: "a", turnId: null }, 1);
    r.clock.advance(249);
    assert.equal(s.messages().filter((m) => m.type === "ack").length, 0);
    r.clock.advance(1);
    assert.deepEqual(s.messages().filter((m) => m.type === "ack"), [{ v: 1, seq: 0, type: "ack", upTo: 1 }]);
    for (let seq = 2; seq <= 33; seq++) s.receive({ type: "text", text: "b", turnId: null }, seq);
    r.clock.advance(0);
    assert.equal(s.messages().filter((m) => m.type === "ack").at(-1).upTo, 33);
  });

  it("handles a duplicate once and acknowledges it again", async () => {
    const r = rig();
    await r.connect();
    const s = r.socket();
    s.receive({ type: "text", text: "once", turnId: null }, 1);
    r.clock.advance(300);
    s.receive({ type: "text", text: "once", turnId: null }, 1);
    r.clock.advance(300);
    assert.equal(r.events.filter((e) => e.type === "text").length, 1);
    assert.equal(s.messages().filter((m) => m.type === "ack").length, 2);
  });

  it("reports an invalid server message and goes on (§9.1)", async () => {
    const r = rig();
    await r.connect();
    r.socket().receiveRaw('{"v":2,"seq":1,"type":"text"}');
    r.socket().receive({ type: "text", text: "after", turnId: null }, 1);
    assert.deepEqual(r.events.filter((e) => e.type === "error").map((e) => (e as any).code), ["UNSUPPORTED_VERSION"]);
    assert.equal(r.events.filter((e) => e.type === "text").length, 1);
  });
});

describe("resuming (§5.4)", () => {
  it("reconnects with backoff, resumes from lastSeq and resends what the server missed, in order, first", async () => {
    const r = rig({ backoffInitialMs: 100 });
    await r.connect();
    const first = r.socket();
    first.receive({ type: "text", text: "x", turnId: null }, 1);
    first.receive({ type: "text", text: "y", turnId: null }, 2);
    r.client.sendText("one");
    r.client.sendText("two");
    first.receive({ type: "ack", upTo: 1 });
    first.drop();
    assert.equal(r.events.at(-1)?.type, "disconnected");
    r.client.sendText("three"); // while disconnected: kept, sent after ready
    r.clock.advance(49); // random() = 0: half of the 100 ms delay
    assert.equal(r.sockets.length, 1);
    r.clock.advance(1);
    assert.equal(r.sockets.length, 2);
    const second = r.socket();
    second.open();
    assert.deepEqual(second.messages(), [{ v: 1, seq: 0, type: "hello", sessionId: "s-1", resumeFrom: 2 }]);
    second.ready({ resumedFrom: 1 });
    assert.deepEqual(
      second.sequenced().map((m) => [m.seq, m.text]),
      [
        [2, "two"],
        [3, "three"],
      ],
    );
    const connected = r.events.filter((e) => e.type === "connected");
    assert.deepEqual(connected.map((e) => (e as any).resumed), [false, true]);
  });

  it("doubles the delay per failed attempt (the first two equal, as in the Python SDK), up to the maximum", async () => {
    const r = rig({ backoffInitialMs: 100, backoffMaxMs: 400, random: () => 1 });
    await r.connect();
    r.socket().drop();
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      const before = r.clock.time;
      const count = r.sockets.length;
      while (r.sockets.length === count) r.clock.advance(1);
      delays.push(r.clock.time - before);
      r.socket().drop(); // the attempt fails before its ready
    }
    assert.deepEqual(delays, [100, 100, 200, 400, 400]);
  });

  it("gives up after giveUpAfterMs without a connection", async () => {
    const r = rig({ giveUpAfterMs: 3000, backoffMaxMs: 500 });
    await r.connect();
    r.socket().drop();
    for (let i = 0; i < 40 && r.events.at(-1)?.type !== "closed"; i++) {
      r.clock.advance(500);
      r.socket().drop();
    }
    const failed = r.events.find((e) => e.type === "sessionFailed");
    assert.equal((failed as any)?.code, "GAVE_UP");
    assert.equal(r.events.at(-1)?.type, "closed");
  });

  it("drops a connection that gets no ready within openTimeoutMs, and retries it", async () => {
    const r = rig({ openTimeoutMs: 2000 });
    await r.connect();
    r.socket().drop();
    r.clock.advance(50); // the first delay: 100 ms, times 0.5 with random() = 0
    assert.equal(r.sockets.length, 2);
    const hanging = r.socket(); // never opens
    r.clock.advance(1999);
    assert.equal(hanging.closed, null);
    r.clock.advance(1);
    assert.notEqual(hanging.closed, null);
    r.clock.advance(200);
    assert.equal(r.sockets.length, 3);
    r.socket().open();
    r.socket().ready({ resumedFrom: 0 });
    assert.equal(r.events.filter((e) => e.type === "connected").length, 2);
    r.clock.advance(10_000); // the timer of an opened connection never fires
    assert.equal(r.sockets.length, 3);
  });

  it("a ready resuming beyond what was sent fails the session, closes, and never replays (§5.4)", async () => {
    const r = rig();
    await r.connect();
    r.client.sendText("one");
    r.socket().drop();
    r.clock.advance(1000);
    const second = r.socket();
    second.open();
    second.ready({ resumedFrom: 9 });
    assert.deepEqual(second.sequenced(), []);
    assert.equal(second.closed?.code, 1000);
    assert.equal((r.events.find((e) => e.type === "sessionFailed") as any).code, "RESUME_FAILED");
    r.clock.advance(60_000);
    assert.equal(r.sockets.length, 2);
    assert.throws(() => r.client.sendText("after"), /closed/);
  });

  it("a resume failing on resumedFrom reports sessionFailed, then closed, to events() too", async () => {
    const r = rig();
    const seen: VrtEvent[] = [];
    const done = (async () => {
      for await (const event of r.client.events()) seen.push(event);
    })();
    await r.connect();
    r.socket().drop();
    r.clock.advance(1000);
    r.socket().open();
    r.socket().ready({ resumedFrom: 9 }); // beyond anything the client sent
    await done;
    const tail = seen.slice(-2).map((e) => [e.type, (e as any).code ?? (e as any).reason]);
    assert.deepEqual(tail, [
      ["sessionFailed", "RESUME_FAILED"],
      ["closed", "the session failed"],
    ]);
    assert.deepEqual(r.events.slice(-2).map((e) => e.type), ["sessionFailed", "closed"]);
  });

  it("a ready that does not match the session resumed closes the connection at once (§5.4)", async () => {
    const r = rig({ openTimeoutMs: 10_000 });
    await r.connect();
    r.socket().drop();
    r.clock.advance(1000);
    const second = r.socket();
    second.open();
    second.ready({ sessionId: "s-other", resumedFrom: 0 });
    assert.equal(second.closed?.code, 1000);
    assert.deepEqual(r.events.slice(-2).map((e) => [e.type, (e as any).code ?? (e as any).reason]), [
      ["sessionFailed", "RESUME_FAILED"],
      ["closed", "the session failed"],
    ]);
    r.clock.advance(60_000); // no open timeout, no reconnection
    assert.equal(r.sockets.length, 2);
    assert.equal(r.events.filter((e) => e.type === "closed").length, 1);
  });

  it("RESUME_FAILED stops resuming (§5.4)", async () => {
    const r = rig();
    await r.connect();
    r.socket().drop();
    r.clock.advance(1000);
    r.socket().open();
    r.socket().receive({ type: "error", code: "RESUME_FAILED", message: "gone", recoverable: false });
    r.socket().drop(4404);
    r.clock.advance(60_000);
    assert.equal(r.sockets.length, 2);
    assert.equal(r.events.at(-1)?.type, "closed");
  });
});

describe("errors, as §5.1's client table has them", () => {
  it("the session is connecting until its connection opens, and again after a loss (§5.1)", async () => {
    const r = rig();
    const ready = r.client.connect();
    assert.equal(r.client.session.state, "connecting");
    r.socket().open();
    assert.equal(r.client.session.state, "waiting");
    r.socket().ready();
    await ready;
    assert.equal(r.client.session.state, "open");
    r.socket().drop();
    assert.equal(r.client.session.state, "connecting");
  });

  it("an error that ends the session (SERVER_SHUTDOWN, not recoverable) stops resuming (§9.2)", async () => {
    const r = rig();
    await r.connect();
    r.socket().receive({ type: "error", code: "SERVER_SHUTDOWN", message: "bye", recoverable: false }, 1);
    r.socket().drop(1001);
    r.clock.advance(60_000);
    assert.equal(r.sockets.length, 1);
    assert.deepEqual(r.events.slice(-2).map((e) => [e.type, (e as any).code ?? (e as any).reason]), [
      ["sessionFailed", "SERVER_SHUTDOWN"],
      ["closed", "the session failed"],
    ]);
  });

  it("RESUME_FAILED on an open connection stops resuming: nothing old is resent (§5.4)", async () => {
    const r = rig();
    await r.connect();
    r.client.sendText("kept");
    r.socket().receive({ type: "error", code: "RESUME_FAILED", message: "lost", recoverable: false }, 1);
    assert.throws(() => r.client.sendText("after"), /closed/);
    r.socket().drop(1011);
    r.clock.advance(60_000);
    assert.equal(r.sockets.length, 1);
    assert.equal((r.events.find((e) => e.type === "sessionFailed") as any).code, "RESUME_FAILED");
  });

  it("UNAUTHORIZED on an open connection is reported; the session goes on (§5.3)", async () => {
    const r = rig();
    await r.connect();
    r.socket().receive({ type: "error", code: "UNAUTHORIZED", message: "token expired", recoverable: false }, 1);
    assert.deepEqual(r.events.filter((e) => e.type === "error").map((e) => (e as any).code), ["UNAUTHORIZED"]);
    assert.equal(r.events.filter((e) => e.type === "sessionFailed").length, 0);
    r.client.sendText("still open");
    assert.equal(r.socket().sequenced().at(-1).text, "still open");
  });
});

describe("heartbeat (§4.4)", () => {
  it("pings after an interval of silence, and resumes a connection silent for 2.5 intervals", async () => {
    const r = rig({ pingIntervalMs: 1000 });
    await r.connect();
    const s = r.socket();
    r.clock.advance(1000);
    assert.equal(s.messages().filter((m) => m.type === "ping").length, 1);
    s.receive({ type: "pong" });
    assert.equal(r.client.rttMs, 0);
    r.clock.advance(2499);
    assert.equal(s.closed, null);
    r.clock.advance(1);
    assert.equal((s.closed as { code?: number } | null)?.code, 4000);
    r.clock.advance(1000);
    assert.equal(r.sockets.length, 2);
  });
});

describe("tools and the epoch gate (§6.2, §7)", () => {
  it("never starts a call of a closed epoch, and answers it INTERRUPTED", async () => {
    const r = rig();
    const log = withTools(r);
    await r.connect();
    const s = r.socket();
    s.receive({ type: "interrupted", epoch: 1 }, 1);
    s.receive(call("c1", 1), 2);
    s.receive(call("c0", 0), 3);
    s.receive(call("c2", 2), 4);
    await tick();
    assert.deepEqual(log, ["record"]);
    assert.deepEqual(results(s).map((m) => [m.callId, m.ok, m.code]), [
      ["c1", false, "INTERRUPTED"],
      ["c0", false, "INTERRUPTED"],
      ["c2", true, undefined],
    ]);
  });

  it("runs calls one at a time in order; queued calls of a closed epoch never run", async () => {
    const r = rig();
    const started: string[] = [];
    const releases: Array<() => void> = [];
    r.client.tool("slow", {}, (_args, { callId }) => {
      started.push(callId);
      return new Promise<string>((resolve) => releases.push(() => resolve(callId)));
    });
    await r.connect();
    const s = r.socket();
    s.receive(call("a", 1, "slow"), 1);
    s.receive(call("b", 1, "slow"), 2);
    s.receive(call("c", 2, "slow"), 3);
    assert.deepEqual(started, ["a"]);
    releases[0]!();
    await tick();
    assert.deepEqual(started, ["a", "b"]);
    s.receive({ type: "interrupted", epoch: 1 }, 4); // b is running; c is of epoch 2
    await tick();
    assert.deepEqual(started, ["a", "b", "c"]);
    releases[1]!(); // b's late outcome is discarded
    releases[2]!();
    await tick();
    assert.deepEqual(results(s).map((m) => [m.callId, m.ok]), [
      ["a", true],
      ["b", false],
      ["c", true],
    ]);
  });

  it("aborts the running tool's signal when its epoch closes, and answers at once", async () => {
    const r = rig();
    let signal: AbortSignal | undefined;
    r.client.tool("wait", {}, (_args, context) => {
      signal = context.signal;
      return new Promise(() => {});
    });
    await r.connect();
    r.socket().receive(call("w", 3, "wait"), 1);
    r.socket().receive({ type: "turn.state", turnId: "t3", epoch: 3, state: "acting" }, 2);
    assert.equal(signal?.aborted, false);
    const epoch = r.client.interrupt("user");
    assert.equal(epoch, 3);
    assert.equal(signal?.aborted, true);
    const sent = r.socket().sequenced();
    assert.deepEqual(sent.map((m) => m.type), ["tool.result", "interrupt"]); // closed locally before sending
    assert.deepEqual(sent[1], { v: 1, seq: 2, type: "interrupt", epoch: 3, reason: "user" });
  });

  it("answers every call exactly once: unknown tool FAILED, ToolError's code, a throw FAILED, invalid arguments INVALID", async () => {
    const r = rig({ validator: jsonSchema });
    const ran: string[] = [];
    r.client.tool("strict", { parameters: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } }, (args) => {
      ran.push("strict");
      return args;
    });
    r.client.tool("reject", {}, () => {
      throw new ToolError("REJECTED", "no");
    });
    r.client.tool("boom", {}, async () => {
      throw new TypeError("bad");
    });
    r.client.tool("nothing", {}, () => undefined);
    await r.connect();
    const s = r.socket();
    s.receive(call("1", 1, "missing"), 1);
    s.receive(call("2", 1, "reject"), 2);
    s.receive(call("3", 1, "boom"), 3);
    s.receive(call("4", 1, "strict", { n: "x" }), 4);
    s.receive(call("5", 1, "strict", { n: 2 }), 5);
    s.receive(call("6", 1, "nothing"), 6);
    s.receive(call("5", 1, "strict", { n: 2 }), 5); // a duplicate: not run again
    for (let i = 0; i < 10; i++) await tick();
    assert.deepEqual(ran, ["strict"]);
    assert.deepEqual(
      results(s).map((m) => [m.callId, m.ok, m.code ?? m.output]),
      [
        ["1", false, "FAILED"],
        ["2", false, "REJECTED"],
        ["3", false, "FAILED"],
        ["4", false, "INVALID"],
        ["5", true, { n: 2 }],
        ["6", true, null],
      ],
    );
  });

  it("emits toolCall only for a call that runs: not for one answered INVALID (§7.1)", async () => {
    const r = rig({ validator: jsonSchema });
    r.client.tool("strict", { parameters: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } }, (args) => args);
    await r.connect();
    r.socket().receive(call("bad", 1, "strict", { n: "x" }), 1);
    r.socket().receive(call("good", 1, "strict", { n: 1 }), 2);
    for (let i = 0; i < 5; i++) await tick();
    assert.deepEqual(r.events.filter((e) => e.type === "toolCall").map((e) => (e as any).callId), ["good"]);
    assert.deepEqual(
      r.events.filter((e) => e.type === "toolResult").map((e) => [(e as any).callId, (e as any).code ?? "ok"]),
      [
        ["bad", "INVALID"],
        ["good", "ok"],
      ],
    );
  });

  it("a callId seen again under a new seq is the same call: one run, one result (§6.3, §7.2)", async () => {
    const r = rig();
    const log = withTools(r);
    await r.connect();
    r.socket().receive(call("same", 1), 1);
    await tick();
    r.socket().receive(call("same", 1), 2);
    r.socket().receive({ type: "interrupted", epoch: 1 }, 3);
    r.socket().receive(call("same", 1), 4);
    await tick();
    assert.deepEqual(log, ["record"]);
    assert.deepEqual(results(r.socket()).map((m) => m.ok), [true]);
  });

  it("a call resent after a resume with its result already kept is not run again", async () => {
    const r = rig();
    const log = withTools(r);
    await r.connect();
    r.socket().receive(call("c", 1), 1);
    await tick();
    r.socket().drop();
    r.clock.advance(1000);
    r.socket().open();
    r.socket().ready({ resumedFrom: 0 });
    r.socket().receive(call("c", 1), 1);
    await tick();
    assert.deepEqual(log, ["record"]);
    assert.equal(results(r.socket()).length, 1); // the kept result, resent once
  });
});

describe("audio (§8.3)", () => {
  const frame = (seq: number, bytes: number) => {
    const data = new Uint8Array(5 + bytes);
    data[0] = 2;
    new DataView(data.buffer).setUint32(1, seq);
    return data.buffer;
  };
  it("discards frames before any audio.start and frames of a closed epoch; caps playback at what arrived", async () => {
    const r = rig();
    await r.connect();
    const s = r.socket();
    s.receiveRaw(frame(0, 480));
    s.receive({ type: "audio.start", itemId: "a", turnId: "t1", epoch: 1 });
    s.receiveRaw(frame(1, 480)); // 10 ms at 24 kHz
    s.receive({ type: "interrupted", epoch: 1 }, 1);
    s.receive({ type: "audio.start", itemId: "b", turnId: "t1", epoch: 1 });
    s.receiveRaw(frame(2, 480));
    const audio = r.events.filter((e) => e.type === "audio");
    assert.deepEqual(audio.map((e) => (e as any).itemId), ["a"]);
    assert.equal(r.client.playback("a", 500), 10);
  });
});

describe("events as an async iterator", () => {
  it("yields events in order and ends after closed", async () => {
    const r = rig();
    const seen: string[] = [];
    const done = (async () => {
      for await (const event of r.client.events()) seen.push(event.type);
    })();
    await r.connect();
    r.socket().receive({ type: "text", text: "hi", turnId: null }, 1);
    const closing = r.client.close();
    assert.equal(r.socket().closed?.code, 1000);
    r.socket().drop(1000);
    await closing;
    await done;
    assert.deepEqual(seen, ["connected", "message", "text", "closed"]);
  });
});
