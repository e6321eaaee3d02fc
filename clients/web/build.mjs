// Builds the package (dist/), the demo page (dist/demo/), the conformance runner's page
// (dist/conformance/) and, with --tests, the Node tests (dist-test/), after generating
// the protocol constants (src/gen/protocol.ts, tools/generate.mjs). --size prints the
// minified + gzip size of each entry point. esbuild bundles; tsc writes the .d.ts files.
// --package-demo also copies the demo page into the Python package
// (src/vrt/_web/demo, committed), so that `vrt demo` works from a wheel built without
// Node; tests/test_demo_command.py checks that copy against a fresh build.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { generate } from "./tools/generate.mjs";

const here = new URL(".", import.meta.url).pathname;
const args = new Set(process.argv.slice(2));
const common = { bundle: true, format: "esm", target: "es2022", logLevel: "warning", absWorkingDir: here };

/** The AudioWorklet processors, bundled on their own and inlined into the audio module as text. */
async function worklets() {
  const out = {};
  for (const name of ["capture", "playback"]) {
    const result = await build({
      ...common,
      entryPoints: [`src/audio/${name}-worklet.ts`],
      format: "iife",
      minify: true,
      write: false,
    });
    out[name] = result.outputFiles[0].text;
  }
  return out;
}

function define(code) {
  return {
    __CAPTURE_WORKLET__: JSON.stringify(code.capture),
    __PLAYBACK_WORKLET__: JSON.stringify(code.playback),
  };
}

async function library(code) {
  rmSync(`${here}dist`, { recursive: true, force: true });
  await build({
    ...common,
    entryPoints: { index: "src/index.ts", audio: "src/audio/index.ts", "json-schema": "src/json-schema.ts" },
    outdir: "dist",
    external: ["@cfworker/json-schema"],
    define: define(code),
    splitting: false,
  });
  execFileSync(process.execPath, [`${here}node_modules/typescript/bin/tsc`, "-p", "tsconfig.json"], { stdio: "inherit", cwd: here });
  // The demo page and the conformance runner's page: the SDK bundled in, minified.
  for (const [name, entry] of [["demo", "demo/demo.ts"], ["conformance", "conformance/page.ts"]]) {
    await build({ ...common, entryPoints: { [name]: entry }, outdir: `dist/${name}`, minify: true, sourcemap: true, define: define(code) });
    for (const file of readdirSync(`${here}${name === "demo" ? "demo" : "conformance"}`)) {
      if (/\.(html|css|svg)$/.test(file)) cpSync(`${here}${name}/${file}`, `${here}dist/${name}/${file}`);
    }
  }
}

async function sizes(code) {
  const rows = [];
  for (const [name, entry, external] of [
    ["core (vrealtime)", "src/index.ts", []],
    ["audio (vrealtime/audio)", "src/audio/index.ts", []],
    ["json-schema adapter + @cfworker/json-schema", "src/json-schema.ts", []],
  ]) {
    const result = await build({ ...common, entryPoints: [entry], minify: true, write: false, external, define: define(code) });
    const bytes = result.outputFiles[0].contents;
    rows.push({ name, minified: bytes.length, gzip: gzipSync(bytes, { level: 9 }).length });
  }
  for (const row of rows) console.log(`${row.name}: ${row.minified} B minified, ${row.gzip} B gzip`);
  writeFileSync(`${here}dist/sizes.json`, JSON.stringify(rows, null, 2));
}

async function tests(code) {
  rmSync(`${here}dist-test`, { recursive: true, force: true });
  mkdirSync(`${here}dist-test`);
  const entries = readdirSync(`${here}test`).filter((f) => f.endsWith(".test.ts")).map((f) => `test/${f}`);
  await build({ ...common, entryPoints: entries, outdir: "dist-test", platform: "node", define: define(code), sourcemap: "inline" });
}

/** The demo page for the Python package: its page, style and script, without the
 * source map (a quarter of a megabyte of sources a page user never needs). */
function packageDemo() {
  const target = `${here}../../src/vrt/_web/demo`;
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  for (const file of ["index.html", "demo.css"]) cpSync(`${here}dist/demo/${file}`, `${target}/${file}`);
  const script = readFileSync(`${here}dist/demo/demo.js`, "utf8").replace(/\n\/\/# sourceMappingURL=demo\.js\.map\n?$/, "\n");
  writeFileSync(`${target}/demo.js`, script);
}

generate();
const code = await worklets();
await library(code);
if (args.has("--package-demo")) packageDemo();
if (args.has("--tests")) await tests(code);
if (args.has("--size")) await sizes(code);
