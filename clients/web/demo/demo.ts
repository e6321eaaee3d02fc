/**
 * The demo page: a conversation with any vRT server through the browser SDK, by text
 * and by voice (push-to-talk or always-on), with tool calls shown as they start and
 * settle, a "talk over it" interrupt, and the connection's state, resumes and round
 * trip. `vrt demo` serves it next to a server, whose address it reads from
 * `config.json`, and connects to it on load (`?connect=0`: not). A server named in the
 * page's own address (`?url=`) could be anyone's: the page connects there only when the
 * user presses Connect. The microphone opens only after a gesture on the page (`?mic=`
 * preselects its mode). The page's objects are on `window.vrtDemo` for the browser tests.
 */
import * as core from "../src/index.js";
import { VrtClient, type VrtEventMap } from "../src/index.js";
import * as audio from "../src/audio/index.js";
import { Microphone, Speaker, preferredFormats } from "../src/audio/index.js";
import { jsonSchema } from "../src/json-schema.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const params = new URLSearchParams(location.search);

interface Demo {
  client: VrtClient | null;
  speaker: Speaker | null;
  microphone: Microphone | null;
  audio: AudioContext | null;
  toolsRun: string[];
  /** What the speaker reported at each stop (§8.4). */
  playbacks: Array<Array<{ itemId: string; playedMs: number }>>;
}
const demo: Demo = { client: null, speaker: null, microphone: null, audio: null, toolsRun: [], playbacks: [] };
// For the browser tests and the curious: the page's objects, and the SDK itself.
Object.assign(window, { vrtDemo: demo, vrealtime: { ...core, ...audio, jsonSchema } });

/** The server of the page's own site (`vrt demo`'s config.json), if any. */
async function ownServer(): Promise<string | null> {
  try {
    const config = (await (await fetch("config.json")).json()) as { url?: string };
    return config.url ?? null;
  } catch {
    return null; // served without `vrt demo`
  }
}

/** Where to connect, and whether that is the page's own server (or the usual port of
 * its host): a server named in the page's address is not, whoever wrote the link. */
async function target(): Promise<{ url: string; own: boolean }> {
  const own = (await ownServer()) ?? `ws://${location.hostname || "127.0.0.1"}:8765`;
  const named = params.get("url");
  if (named && named !== own) return { url: named, own: false };
  return { url: own, own: true };
}

// --- the transcript --------------------------------------------------------------------

const transcript = $<HTMLOListElement>("transcript");
let agentLine: HTMLLIElement | null = null;
const toolLines = new Map<string, HTMLLIElement>();
const turnLines = new Map<string, HTMLLIElement[]>();
/** Each turn's epoch, and whether it ended normally (idle). */
const turns = new Map<string, { epoch: number; done: boolean }>();

function line(kind: string, text: string, turnId?: string | null): HTMLLIElement {
  const li = document.createElement("li");
  li.className = kind;
  li.textContent = text;
  transcript.append(li);
  transcript.scrollTop = transcript.scrollHeight;
  if (turnId) turnLines.set(turnId, [...(turnLines.get(turnId) ?? []), li]);
  return li;
}

// --- tools the page hosts ----------------------------------------------------------------

function hostTools(client: VrtClient): void {
  const tools: Array<[string, string]> = [];
  client.tool("get_time", { description: "The current local time, ISO 8601." }, () => {
    demo.toolsRun.push("get_time");
    return new Date().toISOString();
  });
  tools.push(["get_time()", "the local time"]);
  client.tool(
    "add",
    {
      description: "Add two numbers.",
      parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
    },
    ({ a, b }: { a: number; b: number }) => {
      demo.toolsRun.push("add");
      return a + b;
    },
  );
  tools.push(["add(a, b)", "a + b"]);
  client.tool(
    "set_color",
    {
      description: "Set the page's accent colour.",
      parameters: { type: "object", properties: { color: { type: "string", pattern: "^#[0-9a-fA-F]{6}$" } }, required: ["color"] },
    },
    async ({ color }: { color: string }, { signal }) => {
      demo.toolsRun.push("set_color");
      await new Promise((resolve) => setTimeout(resolve, 300)); // long enough to be interrupted
      signal.throwIfAborted(); // check before committing (§7.2): an interrupted call changes nothing
      document.documentElement.style.setProperty("--accent", color);
      return { color };
    },
  );
  tools.push(["set_color(color)", "after 300 ms, unless interrupted"]);
  $("tools").replaceChildren(...tools.map(([name, what]) => Object.assign(document.createElement("li"), { textContent: `${name}: ${what}` })));
}

// --- connecting ----------------------------------------------------------------------

function setState(state: string, cls = ""): void {
  const el = $("state");
  el.textContent = state;
  el.className = cls;
}

function enable(on: boolean): void {
  for (const id of ["say", "send", "mic-mode", "interrupt"]) ($(id) as HTMLInputElement).disabled = !on;
}

async function connect(url: string): Promise<void> {
  // Made on load the context may start suspended (autoplay policy): it resumes at the
  // first gesture on the page, and the reply's audio plays from then on.
  demo.audio ??= new AudioContext({ latencyHint: "interactive" });
  void demo.audio.resume().catch(() => undefined);
  const formats = await preferredFormats({ opus: params.get("opus") === "1" });
  const client = new VrtClient(url, { validator: jsonSchema, ...formats, capabilities: ["tool-stream-v1"] });
  hostTools(client);
  demo.client = client;
  wire(client);
  const jitter = Number(params.get("jitter")) || undefined; // ?jitter=MS: the playback buffer
  demo.speaker = await Speaker.start(client, demo.audio, {
    ...(jitter ? { jitterMs: jitter } : {}),
    onStopped: (played) => {
      demo.playbacks.push(played);
      $("playback").textContent = played.map((p) => `${p.itemId.slice(0, 8)}: ${Math.round(p.playedMs)} ms`).join(", ") || "stopped";
    },
  });
  setState("connecting");
  $("connect").textContent = "Disconnect";
  try {
    await client.connect();
  } catch (error) {
    line("note", `could not connect: ${String(error)}`);
    setState("closed", "closed");
    $("connect").textContent = "Connect";
    demo.client = null;
  }
}

function wire(client: VrtClient): void {
  const on = <K extends keyof VrtEventMap>(type: K, handler: (detail: VrtEventMap[K]) => void) =>
    client.addEventListener(type, (event) => handler(event.detail));
  on("connected", (e) => {
    setState(e.resumed ? "open (resumed)" : "open", "open");
    $("session").textContent = e.sessionId;
    $("formats").textContent = `in ${e.input.encoding} ${e.input.sampleRate ?? ""}, out ${e.output.encoding} ${e.output.sampleRate ?? ""}`;
    line("note", e.resumed ? "resumed: nothing lost" : "connected");
    enable(true);
    preselectedMicrophone(); // a gesture may have come while it connected
  });
  on("disconnected", (e) => {
    setState(e.resuming ? "resuming…" : "disconnected", "resuming");
    line("note", `connection lost (${e.code ?? "no close code"})${e.resuming ? ", resuming" : ""}`);
  });
  on("sessionFailed", (e) => line("note", `session failed: ${e.code} ${e.message}`));
  on("closed", (e) => {
    setState(`closed: ${e.reason}`, "closed");
    enable(false);
    $("connect").textContent = "Connect";
    stopMicrophone();
  });
  on("error", (e) => line("note", `error ${e.code}: ${e.message}`));
  on("turn", (e) => {
    $("turn").textContent = `${e.state} (epoch ${e.epoch})`;
    turns.set(e.turnId, { epoch: e.epoch, done: e.state === "idle" });
    if (e.state === "thinking" || e.state === "listening") agentLine = null;
  });
  on("text", (e) => {
    if (agentLine === null) agentLine = line("agent", "", e.turnId);
    agentLine.textContent += e.text; // the chunks of a turn concatenate
  });
  on("transcript", (e) => {
    if (e.role === "user" && e.final) line("user", `🎤 ${e.text}`, e.turnId);
  });
  on("toolCall", (e) => toolLines.set(e.callId, line("tool", `⚙ ${e.name}(${JSON.stringify(e.arguments)}) running…`, e.turnId)));
  on("toolResult", (e) => {
    const li = toolLines.get(e.callId) ?? line("tool", `⚙ ${e.name}`);
    const outcome = e.ok ? `→ ${JSON.stringify(e.output)}` : `→ ${e.code}${e.message ? `: ${e.message}` : ""}`;
    li.textContent = `⚙ ${e.name} ${outcome}`;
    li.classList.add(e.ok ? "ok" : "failed");
  });
  on("interrupted", (e) => {
    line("note", `${e.local ? "you interrupted" : "interrupted"} (epoch ${e.epoch})`);
    $("turn").textContent = `interrupted (epoch ${e.epoch})`;
    agentLine = null;
    // What the agent said in the interrupted turn was cut short: strike it through.
    for (const [turnId, turn] of turns) {
      if (turn.done || turn.epoch > e.epoch) continue;
      turn.done = true;
      for (const li of turnLines.get(turnId) ?? []) if (li.classList.contains("agent")) li.classList.add("interrupted");
    }
  });
  on("audioStart", (e) => ($("playback").textContent = `playing ${e.itemId.slice(0, 8)}…`));
}

// --- the microphone -----------------------------------------------------------------------

async function startMicrophone(mode: "always" | "push-to-talk"): Promise<void> {
  stopMicrophone();
  if (!demo.client || !demo.audio) return;
  const level = $<HTMLMeterElement>("level");
  try {
    // ?rawmic=1 turns off the browser's voice processing (the tests feed a WAV file).
    const raw = params.get("rawmic") === "1";
    demo.microphone = await Microphone.start(demo.client, demo.audio, {
      mode,
      onFrame: (f) => (level.value = f.level),
      ...(raw ? { constraints: { echoCancellation: false, noiseSuppression: false, autoGainControl: false, channelCount: 1 } } : {}),
    });
  } catch (error) {
    line("note", `microphone: ${String(error)}`);
    ($("mic-mode") as HTMLSelectElement).value = "off";
    return;
  }
  ($("talk") as HTMLButtonElement).disabled = mode !== "push-to-talk";
}

function stopMicrophone(): void {
  demo.microphone?.stop();
  demo.microphone = null;
  ($("talk") as HTMLButtonElement).disabled = true;
}

function talking(on: boolean): void {
  if (demo.microphone) demo.microphone.talking = on;
  $("talk").classList.toggle("held", on);
}

// --- the page -------------------------------------------------------------------------

/** The microphone mode of `?mic=`, until it opens: after a gesture, once connected. */
let micWanted: "always" | "push-to-talk" | null = null;
let gestured = false;

function preselectedMicrophone(): void {
  const mode = micWanted;
  if (!mode || !gestured || !demo.client?.connected || demo.microphone) return;
  micWanted = null;
  ($("mic-mode") as HTMLSelectElement).value = mode;
  void startMicrophone(mode);
}

/** The first trusted gesture on the page: audio may play, and a preselected
 * microphone (`?mic=`) opens. */
function afterGesture(then: () => void): void {
  const once = (event: Event) => {
    if (!event.isTrusted) return;
    for (const type of ["pointerdown", "keydown"]) removeEventListener(type, once, true);
    void demo.audio?.resume().catch(() => undefined);
    then();
  };
  for (const type of ["pointerdown", "keydown"]) addEventListener(type, once, true);
}

async function main(): Promise<void> {
  const url = $<HTMLInputElement>("url");
  const server = await target();
  url.value = server.url;
  $("connect-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (demo.client) {
      void demo.client.close();
      demo.speaker?.close();
      demo.client = null;
    } else {
      void connect(url.value.trim());
    }
  });
  $("say-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $<HTMLInputElement>("say");
    const text = input.value;
    if (!demo.client || !text.trim()) return;
    line("user", text);
    agentLine = null;
    demo.client.sendText(text);
    input.value = "";
  });
  $("interrupt").addEventListener("click", () => {
    demo.client?.interrupt("user");
  });
  $("mic-mode").addEventListener("change", (event) => {
    const mode = (event.target as HTMLSelectElement).value;
    if (mode === "off") stopMicrophone();
    else void startMicrophone(mode as "always" | "push-to-talk");
  });
  const talk = $("talk");
  talk.addEventListener("pointerdown", () => talking(true));
  for (const type of ["pointerup", "pointerleave"]) talk.addEventListener(type, () => talking(false));
  addEventListener("keydown", (e) => {
    if (e.code === "Space" && !e.repeat && document.activeElement?.id !== "say" && demo.microphone?.talking === false) {
      e.preventDefault();
      talking(true);
    }
  });
  addEventListener("keyup", (e) => {
    if (e.code === "Space" && document.activeElement?.id !== "say") talking(false);
  });
  setInterval(() => {
    const client = demo.client;
    if (!client) return;
    if (client.connected) client.ping();
    $("rtt").textContent = client.rttMs === null ? "–" : `${client.rttMs.toFixed(1)} ms`;
    $("connections").textContent = String(client.stats.connections);
    $("resumes").textContent = String(client.stats.resumes);
  }, 2000);
  const mic = params.get("mic");
  if (mic === "always" || mic === "push-to-talk") {
    micWanted = mic;
    line("note", `the microphone (${mic.replace(/-/g, " ")}) starts at your first click or key press`);
  }
  afterGesture(() => {
    gestured = true;
    preselectedMicrophone();
  });
  if (!server.own) {
    line("note", `this page's address names another server, ${server.url}: press Connect to talk to it`);
  } else if (params.get("connect") !== "0") {
    await connect(server.url);
  }
}

void main();
