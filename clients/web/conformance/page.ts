/**
 * The client under test for `vrt conformance client`, as a page: the conformance
 * contract (conformance/README.md, "What a client under test must do") on the browser
 * SDK, with the real audio pipeline (Speaker) playing and reporting output audio.
 * client-under-test.mjs starts Chromium on it and relays the contract: the
 * environment comes in as `window.vrtConformance`; tool log lines go out through the
 * `vrtLog` binding, the exit status through `vrtExit`.
 */
import { ToolError, VrtClient, type ToolContext, type VrtEvent } from "../src/index.js";
import { floatToPcm16, floatToPcmu, Speaker } from "../src/audio/index.js";
import { formatRate } from "../src/messages.js";
import { jsonSchema } from "../src/json-schema.js";

interface Settings {
  url: string;
  say: string[];
  capabilities: string[];
  auth: string | null;
  pingIntervalMs: number | null;
  audio: "speaker" | "none";
}

declare global {
  interface Window {
    vrtConformance: Settings;
    vrtLog(line: string): Promise<void>;
    vrtExit(code: number, why: string): Promise<void>;
  }
}

const settings = window.vrtConformance;
const FRAME_MS = 20;

/** Appends to VRT_CONFORMANCE_LOG, and returns once the line is in the file. */
function log(entry: unknown): Promise<void> {
  return window.vrtLog(JSON.stringify(entry));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(); // cooperative cancellation: stop early; the result is discarded (§7.2)
    });
  });
}

async function logged<T>(name: string, args: unknown, context: ToolContext, body: () => Promise<T>): Promise<T> {
  // The suite reads the log as the client runs: each line is written before the tool
  // goes on, so the start precedes the result and the finish precedes the next start.
  await log({ callId: context.callId, name, arguments: args });
  try {
    return await body();
  } finally {
    await log({ event: "finished", callId: context.callId });
  }
}

function makeClient(): VrtClient {
  const client = new VrtClient(settings.url, {
    validator: jsonSchema,
    // A preference the suite's default (24 kHz) differs from, so that the audio sent is
    // seen to follow ready.input, not the preference (§5.2).
    input: { encoding: "pcm16", sampleRate: 16000 },
    ...(settings.capabilities.length ? { capabilities: settings.capabilities } : {}),
    ...(settings.auth !== null ? { auth: settings.auth } : {}),
    ...(settings.pingIntervalMs !== null ? { pingIntervalMs: settings.pingIntervalMs } : {}),
  });
  client.tool("conformance.record", { description: "Return the arguments." }, (args, context) =>
    logged("conformance.record", args, context, async () => args),
  );
  client.tool(
    "conformance.slow",
    {
      description: "Sleep ms milliseconds; stops early when cancelled.",
      parameters: { type: "object", properties: { ms: { type: "integer" } }, required: ["ms"] },
    },
    (args: { ms: number }, context) =>
      logged("conformance.slow", args, context, async () => {
        await sleep(args.ms, context.signal);
        return { slept: args.ms };
      }),
  );
  client.tool("conformance.fail", { description: "Always fail." }, (args, context) =>
    logged("conformance.fail", args, context, async () => {
      throw new ToolError("FAILED", "conformance.fail always fails");
    }),
  );
  return client;
}

let said = false;

/**
 * One VRT_SAY line: `/interrupt` (a client-initiated interrupt, §6.2, reason user),
 * `/audio MS` (MS ms of input audio in ready.input's format), `/sleep MS`; any other
 * line is user text, unchanged.
 */
async function perform(client: VrtClient, line: string): Promise<void> {
  const command = /^\/(audio|sleep) (\d+)$/.exec(line);
  if (line === "/interrupt") client.interrupt("user");
  else if (command?.[1] === "sleep") await new Promise((resolve) => setTimeout(resolve, Number(command[2])));
  else if (command?.[1] === "audio") await sendAudio(client, Number(command[2]));
  else client.sendText(line);
}

/** MS ms of a 440 Hz tone, encoded by the SDK in the session's input format, in 20 ms frames at the pace of real time. */
async function sendAudio(client: VrtClient, ms: number): Promise<void> {
  const format = client.session.input!;
  const rate = formatRate(format);
  let sent = 0;
  let start: number | null = null;
  while (sent < ms) {
    const frameMs = Math.min(FRAME_MS, ms - sent);
    const samples = new Float32Array(Math.round((rate * frameMs) / 1000));
    const first = Math.round((rate * sent) / 1000);
    for (let i = 0; i < samples.length; i++) samples[i] = 0.3 * Math.sin((2 * Math.PI * 440 * (first + i)) / rate);
    client.sendAudio(format.encoding === "pcmu" ? floatToPcmu(samples) : floatToPcm16(samples));
    sent += frameMs;
    start ??= performance.now();
    const wait = start + sent - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  }
}
let audioContext: AudioContext | null = null;

/** Runs one session; "done" (the server closed with 1000), "new-session" (RESUME_FAILED) or "stopped". */
async function serve(client: VrtClient, events: AsyncIterableIterator<VrtEvent>, speaker: Speaker | null): Promise<string> {
  let failure: string | null = null;
  try {
    for await (const event of events) {
      if (event.type === "sessionFailed") failure = event.code;
      else if (event.type === "disconnected" && event.code === 1000) return "done";
      else if (event.type === "closed") break;
    }
  } finally {
    speaker?.close();
    await client.close();
  }
  return failure === "RESUME_FAILED" ? "new-session" : "stopped";
}

async function main(): Promise<void> {
  for (;;) {
    const client = makeClient();
    const events = client.events(); // subscribed before connect: every event is seen
    let speaker: Speaker | null = null;
    if (settings.audio === "speaker") {
      audioContext ??= new AudioContext({ latencyHint: "interactive" });
      await audioContext.resume();
      speaker = await Speaker.start(client, audioContext);
    }
    const outcome = serve(client, events, speaker);
    try {
      await client.connect();
    } catch (error) {
      await window.vrtExit(1, `browser client: ${String(error)}`);
      return;
    }
    if (!said) {
      // VRT_SAY goes once, into the first session only.
      said = true;
      for (const line of settings.say) await perform(client, line);
    }
    const result = await outcome;
    if (result === "done") {
      await window.vrtExit(0, "the server closed with 1000");
      return;
    }
    if (result !== "new-session") {
      await window.vrtExit(1, `browser client: the session ended (${result})`);
      return;
    }
    console.error("browser client: RESUME_FAILED; opening a new session");
  }
}

void main();
