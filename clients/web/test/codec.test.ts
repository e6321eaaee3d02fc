// The language-neutral vectors (examples/): every frame a server sends is classified by
// this decoder exactly as the vectors say (and as the Python decoder does), and every
// binary frame parses byte for byte.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decodeServer, encode } from "../src/codec.js";
import { buildFrame, parseFrame } from "../src/frames.js";
import { listJson, readJson } from "./helpers.js";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

describe("examples/server vectors (a client decodes them)", () => {
  const files = listJson("examples", "server");
  it("has the vector files", () => assert.ok(files.length >= 19));
  for (const file of files) {
    const vectors = readJson("examples", "server", file);
    assert.equal(vectors.sender, "server");
    describe(file, () => {
      for (const vector of vectors.cases) {
        it(vector.id, () => {
          const text: string = "text" in vector ? vector.text : JSON.stringify(vector.message);
          const outcome = decodeServer(text);
          if (vector.valid) {
            assert.ok(outcome.ok, `expected valid, got ${outcome.ok ? "" : `${outcome.code}: ${outcome.reason}`}`);
          } else {
            assert.equal(outcome.ok ? "valid" : outcome.code, vector.error, outcome.ok ? "" : outcome.reason);
          }
        });
      }
    });
  }
});

describe("examples/binary/frames.json", () => {
  const vectors = readJson("examples", "binary", "frames.json");
  for (const vector of vectors.cases) {
    it(vector.id, () => {
      const frame = parseFrame(Buffer.from(vector.hex, "hex"), vector.receiver);
      if (!vector.valid) return assert.equal(frame, null);
      assert.ok(frame);
      assert.equal(frame.kind, vector.kind);
      assert.equal(frame.seq, vector.seq);
      assert.equal(hex(frame.payload), vector.payloadHex);
      assert.equal(hex(buildFrame(vector.kind, vector.seq, frame.payload)), vector.hex);
    });
  }
});

describe("decoder beyond the vectors", () => {
  it("never throws, whatever the text", () => {
    for (const text of ["", "\ufeff{}", "[".repeat(100000), '{"v":1,"type":"text","seq":1,"text":"' + "\\".repeat(3) + '"}', "\u0000"]) {
      const outcome = decodeServer(text);
      assert.equal(outcome.ok, false);
    }
  });
  it("refuses nesting past the depth limit with LIMIT_EXCEEDED", () => {
    const deep = '{"v":1,"seq":1,"type":"tool.call","callId":"c","name":"n","turnId":"t","epoch":1,"arguments":' + "[".repeat(70) + "]".repeat(70) + "}";
    const outcome = decodeServer(deep);
    assert.equal(outcome.ok ? "valid" : outcome.code, "LIMIT_EXCEEDED");
  });
  it("refuses a frame over the size limit before parsing it", () => {
    const outcome = decodeServer('{"v":1}', { maxFrameChars: 4, maxDepth: 64 });
    assert.equal(outcome.ok ? "valid" : outcome.code, "LIMIT_EXCEEDED");
  });
  it("does not resolve a type through inherited properties", () => {
    for (const type of ["toString", "__proto__", "constructor", "hasOwnProperty"]) {
      const outcome = decodeServer(JSON.stringify({ v: 1, seq: 0, type }));
      assert.equal(outcome.ok ? "valid" : outcome.code, "UNKNOWN_TYPE");
    }
  });
  it("refuses what cannot be passed on faithfully: a number beyond a double, an unpaired surrogate", () => {
    const base = '{"v":1,"seq":1,"type":"tool.call","callId":"c","name":"n","turnId":"t","epoch":1,"arguments":';
    for (const value of ["1e400", '"\\ud800"', '{"\\udc00":1}', "[-1e999]"]) {
      const outcome = decodeServer(`${base}${value}}`);
      assert.equal(outcome.ok ? "valid" : outcome.code, "INVALID_FIELD", value);
    }
    assert.ok(decodeServer(`${base}"\\ud83d\\ude00"}`).ok, "a surrogate pair is one character");
    const v = decodeServer('{"v":1e400,"seq":0,"type":"pong"}');
    assert.equal(v.ok ? "valid" : v.code, "UNSUPPORTED_VERSION");
  });
  it("keeps unknown members (§2.2)", () => {
    const outcome = decodeServer('{"v":1,"seq":1,"type":"text","text":"a","turnId":null,"x-future":{"k":[1]}}');
    assert.ok(outcome.ok);
    assert.deepEqual((outcome.message as any)["x-future"], { k: [1] });
  });
  it("a colon inside a string is not taken for a duplicate member", () => {
    const outcome = decodeServer('{"v":1,"seq":1,"type":"text","text":"a:b:\\":c","turnId":null}');
    assert.ok(outcome.ok);
  });
  it("encodes v, seq, type first, integers plainly", () => {
    assert.equal(encode({ type: "playback", itemId: "i", playedMs: 120 }, 7), '{"v":1,"seq":7,"type":"playback","itemId":"i","playedMs":120}');
  });
});
