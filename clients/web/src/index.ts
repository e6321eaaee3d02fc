/**
 * vrealtime: the browser SDK of the vRT (vRealTime) protocol, v1.3.
 * See docs/browser.md in the vrt repository.
 */

export { VrtClient, VrtError } from "./client.js";
export type { ClientOptions, Clock, Credential, SocketFactory, SocketLike } from "./client.js";
export { ToolError } from "./tools.js";
export type { SchemaValidator, ToolContext, ToolHandler, ToolOptions } from "./tools.js";
export type { VrtEvent, VrtEventMap, VrtEventName, VrtEventOf } from "./events.js";
export { decodeServer, encode, DEFAULT_LIMITS } from "./codec.js";
export type { Decoded, Invalid, InvalidCode, Limits } from "./codec.js";
export { buildFrame, parseFrame, HEADER_SIZE } from "./frames.js";
export type { AudioFrame } from "./frames.js";
export { ClientSession, PING_INTERVAL_MS } from "./session.js";
export type { Output, SessionEvent, SessionOptions, SessionState } from "./session.js";
export { formatRate } from "./messages.js";
export type * from "./messages.js";
