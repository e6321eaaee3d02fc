#!/usr/bin/env node
// One headless Chromium that many client-under-test.mjs runs share (VRT_BROWSER_ENDPOINT):
// prints its endpoint on the first line of stdout and runs until SIGTERM or SIGINT.
//
//   node clients/web/conformance/browser-server.mjs > endpoint.txt &
//   VRT_BROWSER_ENDPOINT=$(head -1 endpoint.txt) vrt conformance client -- node .../client-under-test.mjs
import { chromium } from "playwright-core";
import { CHROMIUM_FLAGS } from "./chromium.mjs";

const server = await chromium.launchServer({
  executablePath: process.env.VRT_CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: CHROMIUM_FLAGS,
  host: "127.0.0.1",
  handleSIGTERM: false,
  handleSIGINT: false,
});
console.log(server.wsEndpoint());
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => void server.close().finally(() => process.exit(0)));
}
