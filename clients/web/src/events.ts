/** What a session reports to the application, by event name. */

import type { Format, ServerMessage, ToolStream, ToolStreamPhase, TurnStateName, FailureCode } from "./messages.js";

export interface VrtEventMap {
  /** `ready` arrived: the session is open, or resumed (`resumed`). */
  connected: { sessionId: string; resumed: boolean; input: Format; output: Format; capabilities: string[] };
  /** The connection ended; `resuming` tells whether the client reconnects. */
  disconnected: { code: number | null; reason: string; resuming: boolean };
  /** The session cannot go on: RESUME_FAILED, UNAUTHORIZED, START_FAILED, GAVE_UP, ... */
  sessionFailed: { code: string; message: string };
  /** The client stopped; always the last event. */
  closed: { reason: string };
  /** An `error` from the server, or an invalid message it sent (§9.1). */
  error: { code: string; message: string; recoverable: boolean };
  /** `turn.state` (§6.1). */
  turn: { turnId: string; epoch: number; state: TurnStateName };
  /** One chunk of the agent's text; the chunks of a turn concatenate. */
  text: { text: string; turnId: string | null };
  /** A user or agent transcript; a partial one is replaced by the next. */
  transcript: { role: "user" | "agent"; text: string; final: boolean; itemId: string | null; turnId: string | null };
  /** An output audio item begins (§8.3); never for an item of a closed epoch. */
  audioStart: { itemId: string; turnId: string; epoch: number };
  /** Output audio of an item whose epoch is open, in the session's output format. */
  audio: { itemId: string; seq: number; payload: Uint8Array };
  /** Stop playback now and discard buffered output audio (§8.4, §6.2). */
  playbackStop: { epoch: number };
  /** An epoch closed: by this client (`local`) or by the server (`interrupted`). */
  interrupted: { epoch: number; local: boolean };
  /** `tool.call.delta`: display only, never act on it (§7.4). */
  toolPreview: { callId: string; turnId: string; epoch: number; preview: unknown };
  /** A `tool.stream` phase (§7.5), or `cancelled` decided locally when this client closed the epoch. */
  toolStream: { callId: string; name: string; turnId: string; epoch: number; phase: ToolStreamPhase; message: ToolStream | null };
  /** One of your tools starts running now. */
  toolCall: { callId: string; name: string; arguments: unknown; turnId: string; epoch: number };
  /** The result sent for a call (§7.2), including calls that never ran. */
  toolResult: { callId: string; name: string; epoch: number; ok: boolean; output?: unknown; code?: FailureCode; message?: string | null };
  /** Every sequenced server message the session handled, once, in order (after §4.3). For logging. */
  message: { seq: number; message: ServerMessage };
}

export type VrtEventName = keyof VrtEventMap;

/** An event as the async iterator yields it: its name in `type`, then its members. */
export type VrtEvent = { [K in VrtEventName]: { type: K } & VrtEventMap[K] }[VrtEventName];

/** An event of one name. */
export type VrtEventOf<K extends VrtEventName> = { type: K } & VrtEventMap[K];
