/**
 * The vRT v1 control messages as TypeScript types, generated from the schemas
 * (schema/client, schema/server; spec/messages.md at the repository root explains each
 * member) when the package is built. A decoded message keeps every member it arrived
 * with, unknown ones included (§2.2).
 */

import type { Format } from "./gen/protocol.js";

export type {
  AgentText,
  AudioStart,
  ClientAck,
  ClientMessage,
  ContextUpdate,
  Encoding,
  ErrorMessage,
  FailureCode,
  Format,
  Hello,
  Interrupt,
  InterruptReason,
  Interrupted,
  JsonSchema,
  Ping,
  Playback,
  Pong,
  Ready,
  ServerAck,
  ServerMessage,
  ToolCall,
  ToolCallDelta,
  ToolDeclaration,
  ToolResult,
  ToolStream,
  ToolStreamPhase,
  Transcript,
  TurnState,
  TurnStateName,
  UserText,
} from "./gen/protocol.js";

/** The sample rate of a format in effect: pcm16 defaults to 24000 Hz, pcmu is 8000, opus 48000. */
export function formatRate(format: Format): number {
  if (format.sampleRate !== undefined) return format.sampleRate;
  return format.encoding === "pcmu" ? 8000 : format.encoding === "opus" ? 48000 : 24000;
}
