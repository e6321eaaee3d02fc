// The sample formats and the resampler of vrealtime/audio (§8.2).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { floatToPcm16, floatToPcmu, muLawDecode, muLawEncode, pcm16ToFloat, pcmuToFloat, Resampler } from "../src/audio/pcm.js";

function sine(rate: number, hz: number, ms: number, amplitude = 0.5): Float32Array {
  const out = new Float32Array(Math.round((rate * ms) / 1000));
  for (let i = 0; i < out.length; i++) out[i] = amplitude * Math.sin((2 * Math.PI * hz * i) / rate);
  return out;
}

function rms(x: Float32Array, from = 0): number {
  let sum = 0;
  for (let i = from; i < x.length; i++) sum += x[i]! * x[i]!;
  return Math.sqrt(sum / (x.length - from));
}

describe("G.711 µ-law", () => {
  it("codes 0 as 0xFF and decodes 0xFF to 0, symmetric around zero", () => {
    assert.equal(muLawEncode(0), 0xff);
    assert.equal(muLawDecode(0xff), 0);
    for (const s of [1, 100, 1000, 8000, 32000]) assert.equal(muLawEncode(-s), muLawEncode(s) & 0x7f);
  });
  it("clips beyond 32635 and keeps every decoded value a fixed point", () => {
    assert.equal(muLawEncode(32767), muLawEncode(32635));
    assert.equal(muLawEncode(-32768), muLawEncode(-32635));
    for (let code = 0; code < 256; code++) {
      if (code === 0x7f) continue; // -0 and +0 decode alike; 0 codes as 0xFF
      assert.equal(muLawEncode(muLawDecode(code)), code, `code ${code}`);
    }
  });
  it("round-trips float frames within the coder's step", () => {
    const x = sine(8000, 440, 20, 0.5);
    const y = pcmuToFloat(floatToPcmu(x));
    for (let i = 0; i < x.length; i++) assert.ok(Math.abs(x[i]! - y[i]!) < 0.02);
  });
});

describe("pcm16", () => {
  it("is little-endian, rounded and clipped", () => {
    assert.deepEqual([...floatToPcm16(Float32Array.from([0, 1, -1, 2, 0.5]))], [0, 0, 0xff, 0x7f, 0x01, 0x80, 0xff, 0x7f, 0x00, 0x40]);
    assert.deepEqual([...pcm16ToFloat(Uint8Array.from([0x00, 0x80, 0x00, 0x40, 0x7f]))], [-1, 0.5]);
  });
});

describe("Resampler", () => {
  it("keeps a 440 Hz tone's level from 48 kHz to 24 kHz, fed in render quanta", () => {
    const r = new Resampler(48000, 24000);
    const input = sine(48000, 440, 500);
    const parts: number[] = [];
    for (let i = 0; i < input.length; i += 128) parts.push(...r.process(input.subarray(i, i + 128)));
    assert.ok(Math.abs(parts.length - 12000) <= 16, `${parts.length} samples`);
    assert.ok(Math.abs(rms(Float32Array.from(parts), 100) - 0.5 / Math.SQRT2) < 0.005);
  });
  it("filters what the lower rate cannot carry: 14 kHz at 48 kHz to 24 kHz is 40 dB down", () => {
    const out = new Resampler(48000, 24000).process(sine(48000, 14000, 200));
    assert.ok(rms(out, 100) < (0.5 / Math.SQRT2) * 0.01, `rms ${rms(out, 100)}`);
  });
  it("converts 24 kHz to 44.1 kHz (no integer ratio) at the right length and level", () => {
    const out = new Resampler(24000, 44100).process(sine(24000, 440, 1000));
    assert.ok(Math.abs(out.length - 44100) <= 32, `${out.length}`);
    assert.ok(Math.abs(rms(out, 200) - 0.5 / Math.SQRT2) < 0.005);
  });
});
