#!/usr/bin/env node
// The browser SDK as a client under test for `vrt conformance client`:
//
//   vrt conformance client -- node clients/web/conformance/client-under-test.mjs
//
// Node starts Chromium (Debian's /usr/bin/chromium, or VRT_CHROMIUM) headless, serves
// the page built on the SDK (dist/conformance/, `npm run build`) from 127.0.0.1 and
// relays the contract of conformance/README.md: the VRT_* environment goes into the
// page; each tool log line the page reports is appended to VRT_CONFORMANCE_LOG at
// once; the page's exit status is this process's. VRT_BROWSER_AUDIO=none runs the page
// without the Speaker (no playback reports).
import { appendFileSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { CHROMIUM_FLAGS } from "./chromium.mjs";

const env = process.env;
if (!env.VRT_URL) {
  console.error("client-under-test: VRT_URL is not set");
  process.exit(2);
}
const root = new URL("../dist/conformance/", import.meta.url);
const files = {
  "/": ["page.html", "text/html"],
  "/conformance.js": ["conformance.js", "text/javascript"],
  "/conformance.js.map": ["conformance.js.map", "application/json"],
};


const settings = {
  url: env.VRT_URL,
  say: (env.VRT_SAY ?? "").split("\n").filter((line) => line !== ""),
  capabilities: (env.VRT_CAPABILITIES ?? "").split(",").map((c) => c.trim()).filter(Boolean),
  auth: env.VRT_AUTH || null,
  pingIntervalMs: env.VRT_PING_INTERVAL ? Number(env.VRT_PING_INTERVAL) * 1000 : null,
  audio: env.VRT_BROWSER_AUDIO === "none" ? "none" : "speaker",
};

const server = createServer((request, response) => {
  const entry = files[new URL(request.url ?? "/", "http://x").pathname];
  if (!entry) {
    response.writeHead(204).end();
    return;
  }
  response.writeHead(200, { "content-type": entry[1], "cache-control": "no-store" });
  response.end(readFileSync(new URL(entry[0], root)));
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const origin = `http://127.0.0.1:${server.address().port}`;

// One Chromium per run, or, with VRT_BROWSER_ENDPOINT (browser-server.mjs), a fresh
// context in a Chromium shared by many runs: the same isolation, without a browser
// start per check.
const profile = mkdtempSync(join(tmpdir(), "vrt-chromium-"));
let browser;
let exiting = false;

async function exit(code, why) {
  if (exiting) return;
  exiting = true;
  if (why) console.error(why);
  await browser?.close().catch(() => {});
  server.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit(code);
}

for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => void exit(0));

let context;
if (env.VRT_BROWSER_ENDPOINT) {
  const shared = await chromium.connect(env.VRT_BROWSER_ENDPOINT);
  context = await shared.newContext();
  browser = shared; // closing the connection drops this run's context
} else {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: env.VRT_CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: CHROMIUM_FLAGS,
    handleSIGTERM: false,
    handleSIGINT: false,
  });
  browser = context;
}
const page = context.pages()[0] ?? (await context.newPage());
page.on("console", (message) => console.error(`page ${message.type()}: ${message.text()}`));
page.on("pageerror", (error) => console.error(`page error: ${error.message}`));
page.on("crash", () => void exit(1, "the page crashed"));
await page.exposeFunction("vrtLog", (line) => {
  if (env.VRT_CONFORMANCE_LOG) appendFileSync(env.VRT_CONFORMANCE_LOG, `${line}\n`);
});
await page.exposeFunction("vrtExit", (code, why) => void exit(code, why));
await page.addInitScript((s) => {
  window.vrtConformance = s;
}, settings);
await page.goto(`${origin}/`);
