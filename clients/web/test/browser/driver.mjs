#!/usr/bin/env node
// Drives Debian's Chromium through one browser test scenario and prints its findings as
// one JSON line. The Python tests (tests/browser/) start the servers, run this, and
// judge the result against what the server saw.
//
//   node driver.mjs SCENARIO '{"page": "http://127.0.0.1:PORT/", ...}'
//
// Scenarios: first-visit, demo, microphone, push-to-talk, playback, chaos, latency, origin, sdk.
import { chromium } from "playwright-core";
import { CHROMIUM_FLAGS } from "../../conformance/chromium.mjs";

const [scenario, raw] = process.argv.slice(2);
const options = JSON.parse(raw ?? "{}");
const log = (...args) => console.error(`[${scenario}]`, ...args);

const flags = [...CHROMIUM_FLAGS];
// e.g. "MAP other.example 127.0.0.1": a page of another site, served from this machine.
if (options.hostRules) flags.push(`--host-resolver-rules=${options.hostRules}`);
if (options.wav) {
  flags.push("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream", `--use-file-for-fake-audio-capture=${options.wav}`);
}
const browser = await chromium.launch({ executablePath: process.env.VRT_CHROMIUM ?? "/usr/bin/chromium", args: flags });
const timeout = options.timeoutMs ?? 20000;

async function open(query) {
  const page = await browser.newPage();
  page.setDefaultTimeout(timeout);
  page.on("console", (m) => log("console", m.type(), m.text()));
  page.on("pageerror", (e) => log("pageerror", e.message));
  await page.goto(`${options.page}?${query}`);
  if (query.includes("mic=")) {
    // The page opens the microphone only after a gesture: a click, once connected.
    await page.waitForFunction(() => window.vrtDemo.client?.connected);
    await page.mouse.click(1, 1);
  }
  return page;
}

const transcript = (page) => page.$$eval("#transcript li", (items) => items.map((li) => ({ kind: li.className, text: li.textContent })));

async function say(page, text) {
  await page.fill("#say", text);
  await page.press("#say", "Enter");
}

/** Counts what reaches the speaker: a recorder worklet tapped after the playback node. */
async function tapSpeaker(page) {
  await page.evaluate(async () => {
    const { audio, speaker } = window.vrtDemo;
    const code = `registerProcessor("test-tap", class extends AudioWorkletProcessor {
      constructor() { super(); this.first = -1; this.last = -1; this.frame = 0; this.sumSq = 0; this.loud = 0;
        this.port.onmessage = () => this.port.postMessage({ first: this.first, last: this.last, rate: sampleRate, rms: Math.sqrt(this.sumSq / Math.max(1, this.loud)) }); }
      process(inputs) { const x = inputs[0] && inputs[0][0];
        if (x) for (let i = 0; i < x.length; i++) { if (Math.abs(x[i]) > 0.01) { if (this.first < 0) this.first = this.frame + i; this.last = this.frame + i; }
          if (this.first >= 0 && this.last === this.frame + i) { this.sumSq += x[i] * x[i]; this.loud++; } }
        this.frame += 128; return true; } });`;
    await audio.audioWorklet.addModule(URL.createObjectURL(new Blob([code], { type: "text/javascript" })));
    const tap = new AudioWorkletNode(audio, "test-tap", { numberOfOutputs: 0 });
    speaker.node.connect(tap);
    window.vrtTap = () => new Promise((resolve) => { tap.port.onmessage = (e) => resolve(e.data); tap.port.postMessage("read"); });
  });
}

const scenarios = {
  /** Whether a page of options.page's origin may open a WebSocket to options.url. */
  async origin() {
    const page = await browser.newPage();
    page.setDefaultTimeout(timeout);
    await page.goto(options.page);
    const origin = await page.evaluate(() => location.origin);
    const opened = await page.evaluate((url) => new Promise((resolve) => {
      const ws = new WebSocket(url);
      ws.onopen = () => { ws.close(); resolve(true); };
      ws.onerror = () => resolve(false);
    }), options.url);
    return { origin, opened };
  },

  /** A first visit to `vrt demo`'s page: it connects to its own server on load; a
   * server named in its address (options.foreign) waits for the user's Connect; a
   * preselected microphone waits for a gesture. */
  async "first-visit"() {
    const visit = async (query) => {
      const page = await browser.newPage();
      page.setDefaultTimeout(timeout);
      page.on("pageerror", (e) => log("pageerror", e.message));
      await page.goto(`${options.page}${query}`);
      return page;
    };
    const own = await visit("");
    await own.waitForFunction(() => window.vrtDemo.client?.connected);
    const ownState = await own.$eval("#state", (el) => el.textContent);
    const foreign = await visit(`?connect=1&url=${encodeURIComponent(options.foreign)}`);
    await foreign.waitForSelector("li.note:has-text('names another server')");
    const foreignUrl = await foreign.$eval("#url", (el) => el.value);
    const foreignClient = await foreign.evaluate(() => window.vrtDemo.client !== null);
    const mic = await visit("?mic=always&rawmic=1");
    await mic.waitForFunction(() => window.vrtDemo.client?.connected);
    await mic.waitForSelector("li.note:has-text('first click')");
    const micBeforeGesture = await mic.evaluate(() => window.vrtDemo.microphone !== null);
    await mic.mouse.click(1, 1);
    await mic.waitForFunction(() => window.vrtDemo.microphone !== null);
    return {
      ownState,
      foreignUrl,
      foreignClient,
      foreignNotes: await transcript(foreign),
      micBeforeGesture,
      micAfterGesture: true,
    };
  },

  /** The demo page end to end: text, tools, an interrupt while it speaks, the panel. */
  async demo() {
    const page = await open("connect=1");
    await page.waitForFunction(() => window.vrtDemo.client?.connected);
    await say(page, "echo hello browser");
    // A turn's chunks concatenate; whether the agent puts spaces in them is its business.
    await page.waitForFunction(() => [...document.querySelectorAll("li.agent")].some((li) => li.textContent.replace(/ /g, "") === "hellobrowser"));
    await say(page, 'call add {"a":2,"b":3}');
    await page.waitForSelector("li.tool.ok:has-text('→ 5')");
    await say(page, 'call set_color {"color":"#aa00aa"}');
    await page.waitForSelector("li.tool.ok:has-text('set_color')");
    const accent = await page.evaluate(() => getComputedStyle(document.documentElement).getPropertyValue("--accent").trim());
    await say(page, 'call add {"a":"two","b":3}');
    await page.waitForSelector("li.tool.failed:has-text('INVALID')");
    await say(page, "speak 5000");
    await page.waitForFunction(() => document.getElementById("playback").textContent.startsWith("playing"));
    await page.waitForTimeout(800);
    await page.click("#interrupt");
    await page.waitForSelector("li.note:has-text('you interrupted')");
    await page.waitForFunction(() => window.vrtDemo.playbacks.length > 0);
    await page.waitForTimeout(300);
    const result = {
      transcript: await transcript(page),
      toolsRun: await page.evaluate(() => window.vrtDemo.toolsRun),
      accent,
      playbacks: await page.evaluate(() => window.vrtDemo.playbacks),
      panel: await page.evaluate(() => Object.fromEntries(["state", "session", "connections", "resumes", "rtt", "turn", "formats"].map((id) => [id, document.getElementById(id).textContent]))),
      sessionId: await page.evaluate(() => window.vrtDemo.client.sessionId),
    };
    // The round-trip time comes from pings every 2 s.
    await page.waitForFunction(() => document.getElementById("rtt").textContent.endsWith("ms"), null, { timeout: 6000 });
    result.panel.rtt = await page.$eval("#rtt", (el) => el.textContent);
    return result;
  },

  /** Always-on microphone fed from a WAV file: the user transcript the server heard. */
  async microphone() {
    const page = await open("connect=1&mic=always&rawmic=1");
    await page.waitForFunction(() => window.vrtDemo.client?.connected && window.vrtDemo.microphone);
    await page.waitForSelector("li.user:has-text('(speech')", { timeout });
    return { transcript: await transcript(page), sessionId: await page.evaluate(() => window.vrtDemo.client.sessionId) };
  },

  /** Push-to-talk: nothing is sent until the button is held; then speech is heard. */
  async "push-to-talk"() {
    const page = await open("connect=1&mic=push-to-talk&rawmic=1");
    await page.waitForFunction(() => window.vrtDemo.client?.connected && window.vrtDemo.microphone);
    const sessionId = await page.evaluate(() => window.vrtDemo.client.sessionId);
    await page.waitForTimeout(options.idleMs ?? 2500);
    const before = await transcript(page);
    console.log(JSON.stringify({ phase: "idle", sessionId, transcript: before }));
    await waitForStdin("hold");
    const talk = await page.$("#talk");
    const box = await talk.boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    await page.waitForTimeout(options.holdMs ?? 2500);
    await page.mouse.up();
    await page.waitForSelector("li.user:has-text('(speech')", { timeout });
    return { sessionId, before, transcript: await transcript(page) };
  },

  /** Output audio plays; an interrupt stops it; the report matches what reached the speaker. */
  async playback() {
    const page = await open(`connect=1&jitter=${options.jitterMs ?? 60}`);
    await page.waitForFunction(() => window.vrtDemo.client?.connected);
    await tapSpeaker(page);
    const sessionId = await page.evaluate(() => window.vrtDemo.client.sessionId);
    await say(page, `speak ${options.speakMs ?? 3000}`);
    await page.waitForFunction(() => document.getElementById("playback").textContent.startsWith("playing"));
    await page.waitForTimeout(options.interruptAfterMs ?? 1000);
    await page.click("#interrupt");
    await page.waitForFunction(() => window.vrtDemo.playbacks.length > 0);
    await page.waitForTimeout(400); // anything still rendering would show in the tap
    const tap = await page.evaluate(() => window.vrtTap());
    const played = await page.evaluate(() => window.vrtDemo.playbacks);
    return { sessionId, played, tap, renderedMs: tap.first < 0 ? 0 : ((tap.last - tap.first + 1) * 1000) / tap.rate };
  },

  /** A long conversation through the fault proxy: what the page handled and ran. */
  async chaos() {
    const page = await open("connect=0"); // the scenario makes its own clients
    return page.evaluate(async ({ url, rounds }) => {
      const { VrtClient, jsonSchema } = window.vrealtime;
      const client = new VrtClient(url, { validator: jsonSchema, backoffInitialMs: 20, backoffMaxMs: 200, pingIntervalMs: 1000, giveUpAfterMs: 30000 });
      const runs = [];
      client.tool("record", { parameters: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } }, (args, ctx) => {
        runs.push({ callId: ctx.callId, n: args.n, epoch: ctx.epoch });
        return args;
      });
      const handled = [];
      const texts = [];
      const events = { disconnected: 0, connected: 0, errors: [], failed: [] };
      client.addEventListener("message", (e) => handled.push([e.detail.seq, e.detail.message.type]));
      client.addEventListener("text", (e) => texts.push(e.detail.text));
      client.addEventListener("connected", () => events.connected++);
      client.addEventListener("disconnected", () => events.disconnected++);
      client.addEventListener("error", (e) => events.errors.push(e.detail));
      client.addEventListener("sessionFailed", (e) => events.failed.push(e.detail));
      await client.connect();
      const idle = () => new Promise((resolve) => {
        const on = (e) => { if (e.detail.state === "idle") { client.removeEventListener("turn", on); resolve(); } };
        client.addEventListener("turn", on);
      });
      for (let i = 0; i < rounds; i++) {
        const done = idle();
        client.sendText(i % 2 === 0 ? `echo round ${i}` : `call record {"n":${i}}`);
        if (i % 5 === 0) client.updateContext({ round: i });
        await done;
      }
      const result = { sessionId: client.sessionId, handled, texts, runs, events, sentLast: client.session.outgoing.lastSeq, stats: client.stats, lastSeq: client.session.incoming.lastSeq };
      await client.close();
      return result;
    }, { url: options.url, rounds: options.rounds ?? 150 });
  },
};

Object.assign(scenarios, {
  /** Opus both ways through WebCodecs: the microphone encoded, then the packets played back. */
  async opus() {
    const page = await open("connect=1&opus=1&mic=always&rawmic=1");
    await page.waitForFunction(() => window.vrtDemo.client?.connected && window.vrtDemo.microphone);
    await tapSpeaker(page);
    await page.waitForTimeout(options.captureMs ?? 3000);
    await page.evaluate(() => window.vrtDemo.microphone.stop());
    await say(page, "play");
    await page.waitForFunction(() => document.getElementById("playback").textContent.startsWith("playing"));
    await page.waitForTimeout((options.captureMs ?? 3000) + 500);
    const tap = await page.evaluate(() => window.vrtTap());
    return {
      sessionId: await page.evaluate(() => window.vrtDemo.client.sessionId),
      formats: await page.$eval("#formats", (el) => el.textContent),
      tap,
      renderedMs: tap.first < 0 ? 0 : ((tap.last - tap.first + 1) * 1000) / tap.rate,
    };
  },

  /** Opus is preferred only where WebCodecs can encode and decode it (§8.2). */
  async formats() {
    const page = await open("connect=0"); // the scenario makes its own clients
    return page.evaluate(async () => {
      const { preferredFormats, opusSupported } = window.vrealtime;
      const result = { supported: await opusSupported(), plain: await preferredFormats(), asked: await preferredFormats({ opus: true }) };
      delete window.AudioEncoder; // a browser without WebCodecs audio
      result.without = await preferredFormats({ opus: true });
      return result;
    });
  },

  /**
   * Round trips from the page: the same bytes a VrtClient sends for `echo ping`, over a
   * bare WebSocket to an echo server, then VrtClient.sendText("echo ping") to a vRT
   * server until the first text chunk; and, per echo reply, the time from the first
   * output frame's arrival to its first sample written by the playback worklet.
   */
  async latency() {
    const page = await open("connect=0"); // the scenario makes its own clients
    return page.evaluate(async ({ echoUrl, vrtUrl, iterations }) => {
      const now = () => performance.now();
      const echo = [];
      const bare = new WebSocket(echoUrl);
      await new Promise((resolve, reject) => { bare.onopen = resolve; bare.onerror = reject; });
      for (let i = 1; i <= iterations + 10; i++) {
        const bytes = JSON.stringify({ v: 1, seq: i, type: "text", text: "echo ping" });
        const start = now();
        await new Promise((resolve) => { bare.onmessage = resolve; bare.send(bytes); });
        if (i > 10) echo.push(now() - start);
        await new Promise((resolve) => setTimeout(resolve, 220)); // the same pause as between turns below
      }
      bare.close();

      const { VrtClient, Speaker } = window.vrealtime;
      const context = new AudioContext({ latencyHint: "interactive" });
      await context.resume();
      const client = new VrtClient(vrtUrl);
      const firstFrame = new Map();
      const playbackStart = [];
      client.addEventListener("audio", (e) => { if (!firstFrame.has(e.detail.itemId)) firstFrame.set(e.detail.itemId, now()); });
      await Speaker.start(client, context, { onStarted: (itemId, at) => playbackStart.push(at - firstFrame.get(itemId)) });
      await client.connect();
      const text = [];
      const frame = [];
      for (let i = 0; i < iterations + 10; i++) {
        const idle = new Promise((resolve) => {
          const on = (e) => { if (e.detail.state === "idle") { client.removeEventListener("turn", on); resolve(); } };
          client.addEventListener("turn", on);
        });
        const start = now();
        let back = null;
        client.addEventListener("message", () => (back ??= now()), { once: true });
        const first = new Promise((resolve) => client.addEventListener("text", resolve, { once: true }));
        client.sendText("echo ping");
        await first;
        if (i >= 10) {
          text.push(now() - start);
          frame.push(back - start);
        }
        await idle;
        await new Promise((resolve) => setTimeout(resolve, 220)); // the 200 ms item plays out
      }
      await client.close();
      return { echo, text, frame, playbackStart: playbackStart.slice(10), outputLatencyMs: context.outputLatency * 1000, baseLatencyMs: context.baseLatency * 1000, sampleRate: context.sampleRate };
    }, options);
  },

  /** The microphone (fed from a WAV) for a while: when each frame's last sample was captured, wall clock. */
  async "mic-latency"() {
    const page = await open("connect=0"); // the scenario makes its own clients
    return page.evaluate(async ({ vrtUrl, seconds }) => {
      const { VrtClient, Microphone } = window.vrealtime;
      const context = new AudioContext({ latencyHint: "interactive" });
      await context.resume();
      const client = new VrtClient(vrtUrl);
      await client.connect();
      const captured = [];
      const microphone = await Microphone.start(client, context, {
        constraints: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
        onFrame: (frame) => { if (frame.sent) captured.push(performance.timeOrigin + frame.capturedAt); },
      });
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      microphone.stop();
      const sessionId = client.sessionId;
      await client.close();
      return { sessionId, captured, sampleRate: context.sampleRate };
    }, options);
  },
});

Object.assign(scenarios, {
  /**
   * The SDK alone (from the demo bundle) against the server at options.url: a client
   * with one validated tool ("strict", an integer n) records every event, from its
   * listeners and from events(), until it stops or options.results tool results came;
   * then it closes. Times are milliseconds since the client was made.
   */
  async sdk() {
    const page = await open("connect=0"); // the scenario makes its own client
    return page.evaluate(async ({ url, results, waitMs }) => {
      const { VrtClient, jsonSchema } = window.vrealtime;
      const start = performance.now();
      const client = new VrtClient(url, { validator: jsonSchema, backoffInitialMs: 20, openTimeoutMs: 10000 });
      client.tool("strict", { parameters: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } }, (args) => args);
      const brief = (type, e) => ({ type, at: Math.round(performance.now() - start), ...Object.fromEntries(["code", "reason", "callId", "resumed"].filter((k) => e[k] !== undefined).map((k) => [k, e[k]])) });
      const dispatched = [];
      const names = ["connected", "disconnected", "sessionFailed", "closed", "error", "toolCall", "toolResult"];
      for (const type of names) client.addEventListener(type, (e) => dispatched.push(brief(type, e.detail)));
      const iterated = [];
      const reading = (async () => {
        for await (const event of client.events()) if (names.includes(event.type)) iterated.push(brief(event.type, event));
      })();
      await client.connect().catch(() => {});
      const deadline = performance.now() + waitMs;
      const done = () => dispatched.some((e) => e.type === "closed") || dispatched.filter((e) => e.type === "toolResult").length >= (results ?? Infinity);
      while (!done() && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      if (!dispatched.some((e) => e.type === "closed")) await client.close();
      await Promise.race([reading, new Promise((resolve) => setTimeout(resolve, 2000))]);
      return { dispatched, iterated };
    }, { url: options.url, results: options.results ?? null, waitMs: options.waitMs ?? 15000 });
  },
});

function waitForStdin(word) {
  return new Promise((resolve) => {
    let buffer = "";
    process.stdin.on("data", (chunk) => {
      buffer += chunk;
      if (buffer.includes(word)) resolve();
    });
  });
}

let status = 0;
try {
  const result = await scenarios[scenario]();
  console.log(JSON.stringify(result));
} catch (error) {
  log("failed:", error);
  status = 1;
} finally {
  await browser.close();
}
process.exit(status);
