#!/usr/bin/env node
// Prints the µ-law code of every 16-bit sample, -32768..32767, as hex, for
// tests/browser/test_codec_parity.py to compare with vrt.audio.
import { muLawEncode } from "../dist/audio.js";

const out = new Uint8Array(65536);
for (let s = -32768; s <= 32767; s++) out[s + 32768] = muLawEncode(s);
process.stdout.write(Buffer.from(out).toString("hex"));
