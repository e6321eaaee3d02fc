/** Binary audio frames (§8.1): kind (1 byte), seq (4 bytes, big-endian), payload. */

import { FRAME_KIND, HEADER_SIZE } from "./gen/protocol.js";

export { HEADER_SIZE };
export const INPUT = FRAME_KIND.INPUT;
export const OUTPUT = FRAME_KIND.OUTPUT;

export interface AudioFrame {
  kind: number;
  seq: number;
  payload: Uint8Array;
}

/**
 * Parse a binary frame as `receiver` gets it; null when it is malformed (§8.1): shorter
 * than the header, of an unknown kind, or of the kind the receiver does not accept (a
 * client accepts output audio, kind 2). An empty payload is valid. The payload is a
 * view on `data`, not a copy.
 */
export function parseFrame(data: ArrayBuffer | Uint8Array, receiver: "client" | "server" = "client"): AudioFrame | null {
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data);
  if (bytes.length < HEADER_SIZE) return null;
  const kind = bytes[0]!;
  if (kind !== (receiver === "client" ? OUTPUT : INPUT)) return null;
  const seq = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(1, false);
  return { kind, seq, payload: bytes.subarray(HEADER_SIZE) };
}

/** The bytes of one frame; `seq` is taken modulo 2^32. */
export function buildFrame(kind: number, seq: number, payload: Uint8Array): Uint8Array {
  const frame = new Uint8Array(HEADER_SIZE + payload.length);
  frame[0] = kind;
  new DataView(frame.buffer).setUint32(1, seq >>> 0, false);
  frame.set(payload, HEADER_SIZE);
  return frame;
}
