/**
 * The vRT v1 control messages as TypeScript types (schema/client, schema/server;
 * spec/messages.md at the repository root explains each member). A decoded message keeps every
 * member it arrived with, unknown ones included (§2.2).
 */

export type Encoding = "pcm16" | "pcmu" | "opus";

/** An audio format (§8.2). pcm16 is 24000 Hz when `sampleRate` is absent; pcmu is 8000 Hz. */
export interface Format {
  encoding: Encoding;
  sampleRate?: number;
}

export type FailureCode = "INTERRUPTED" | "REJECTED" | "INVALID" | "TIMEOUT" | "FAILED";
export type InterruptReason = "speech" | "user" | "keyboard";
export type TurnStateName = "listening" | "thinking" | "speaking" | "acting" | "idle";
export type ToolStreamPhase =
  | "start"
  | "arguments-delta"
  | "arguments-complete"
  | "progress"
  | "settled"
  | "cancelled"
  | "failed";

/** A JSON Schema (any object): the tool's `parameters`. */
export type JsonSchema = Record<string, unknown>;

/** A tool declaration as it goes in `hello.tools` (§5.2). */
export interface ToolDeclaration {
  name: string;
  description?: string;
  parameters?: JsonSchema;
}

// --- server to client ------------------------------------------------------------------

export interface Ready {
  type: "ready";
  sessionId: string;
  input: Format;
  output: Format;
  resumedFrom?: number;
  capabilities?: string[];
}
export interface AudioStart {
  type: "audio.start";
  itemId: string;
  turnId: string;
  epoch: number;
}
export interface ServerAck {
  type: "ack";
  upTo: number;
}
export interface Pong {
  type: "pong";
}
export interface ErrorMessage {
  type: "error";
  code: string;
  message: string;
  recoverable: boolean;
}
export interface TurnState {
  type: "turn.state";
  turnId: string;
  epoch: number;
  state: TurnStateName;
}
export interface Transcript {
  type: "transcript";
  role: "user" | "agent";
  text: string;
  final: boolean;
  itemId: string | null;
  turnId: string | null;
}
export interface AgentText {
  type: "text";
  text: string;
  turnId: string | null;
}
export interface ToolCallDelta {
  type: "tool.call.delta";
  callId: string;
  turnId: string;
  epoch: number;
  preview: unknown;
}
export interface ToolCall {
  type: "tool.call";
  callId: string;
  name: string;
  arguments: unknown;
  turnId: string;
  epoch: number;
}
export interface ToolStream {
  type: "tool.stream";
  callId: string;
  name: string;
  turnId: string;
  epoch: number;
  phase: ToolStreamPhase;
  delta?: string;
  arguments?: unknown;
  progress?: unknown;
  ok?: boolean;
  code?: FailureCode;
  message?: string;
}
export interface Interrupted {
  type: "interrupted";
  epoch: number;
}

export type ServerMessage =
  | Ready
  | AudioStart
  | ServerAck
  | Pong
  | ErrorMessage
  | TurnState
  | Transcript
  | AgentText
  | ToolCallDelta
  | ToolCall
  | ToolStream
  | Interrupted;

// --- client to server ------------------------------------------------------------------

export interface Hello {
  type: "hello";
  sessionId?: string;
  resumeFrom?: number;
  tools?: ToolDeclaration[];
  input?: Format;
  output?: Format;
  capabilities?: string[];
  context?: unknown;
  auth?: string | Record<string, unknown>;
}
export interface UserText {
  type: "text";
  text: string;
}
export interface Interrupt {
  type: "interrupt";
  epoch: number;
  reason: InterruptReason;
}
export interface Playback {
  type: "playback";
  itemId: string;
  playedMs: number;
}
export type ToolResult =
  | { type: "tool.result"; callId: string; epoch: number; ok: true; output: unknown }
  | { type: "tool.result"; callId: string; epoch: number; ok: false; code: FailureCode; message: string | null };
export interface ContextUpdate {
  type: "context";
  context: unknown;
}
export interface ClientAck {
  type: "ack";
  upTo: number;
}
export interface Ping {
  type: "ping";
}

export type ClientMessage = Hello | UserText | Interrupt | Playback | ToolResult | ContextUpdate | ClientAck | Ping;

/** The sample rate of a format in effect: pcm16 defaults to 24000 Hz, pcmu is 8000, opus 48000. */
export function formatRate(format: Format): number {
  if (format.sampleRate !== undefined) return format.sampleRate;
  return format.encoding === "pcmu" ? 8000 : format.encoding === "opus" ? 48000 : 24000;
}
