#!/usr/bin/env node
// Classifies server frames with the built SDK: one JSON string per stdin line in, one
// outcome per stdout line out ("valid" or the §9.1 code). tests/browser/test_codec_parity.py
// compares it with the Python decoder on a corpus of mutated frames.
import { createInterface } from "node:readline";
import { decodeServer } from "../dist/index.js";

const lines = createInterface({ input: process.stdin });
const out = [];
for await (const line of lines) {
  const outcome = decodeServer(JSON.parse(line));
  out.push(outcome.ok ? "valid" : outcome.code);
}
process.stdout.write(out.join("\n") + "\n");
