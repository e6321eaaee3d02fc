// Generates src/gen/protocol.ts, the browser SDK's protocol constants, from the
// protocol's own sources: the message types and the decoder's view of each server
// message from schema/ (Appendix A), the registered capabilities from capabilities.json
// (§3.4), and the §5.1 client table, the §7.5 phases, the error and close codes and the
// recommended timings from clients/protocol-tables.json (vrt.protocol's tables, exported
// by tools/export_tables.py; the C SDK's generator reads the same file). Nothing in the
// output is written by hand; the build runs this first (build.mjs, npm test), so the
// file is never committed and never stale. Node only: no Python is needed to build.
//
//   node tools/generate.mjs          # write src/gen/protocol.ts (only if it changed)
import { mkdirSync, readFileSync, readdirSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const web = join(dirname(fileURLToPath(import.meta.url)), "..");
const root = join(web, "..", "..");
export const OUTPUT = join(web, "src", "gen", "protocol.ts");

const readJson = (...parts) => JSON.parse(readFileSync(join(root, ...parts), "utf8"));

function fail(message) {
  throw new Error(`tools/generate.mjs: ${message}`);
}

// --- schema/ -----------------------------------------------------------------------

/** The TypeScript name of a message type: PascalCase of its type, but where both
 * directions define a type (§2.3) or the name would shadow a global. */
const MESSAGE_NAMES = {
  server: { ack: "ServerAck", error: "ErrorMessage", text: "AgentText" },
  client: { ack: "ClientAck", text: "UserText", context: "ContextUpdate" },
};
/** Enumerations that get a type of their own: "file#member" (common: a definition). */
const ENUM_NAMES = {
  "common#format.encoding": "Encoding",
  "common#failureCode": "FailureCode",
  "client/interrupt#reason": "InterruptReason",
  "server/turn.state#state": "TurnStateName",
  "server/tool.stream#phase": "ToolStreamPhase",
};
/** Shared definitions (common.json) as TypeScript types; the envelope (v, seq) apart. */
const REF_TYPES = {
  id: "string",
  idOrNull: "string | null",
  u32: "number",
  epoch: "number",
  json: "unknown",
  format: "Format",
  tool: "ToolDeclaration",
  capabilities: "string[]",
  capability: "string",
  errorCode: "string",
  failureCode: "FailureCode",
};
/** The decoder's rule for each shared definition (src/codec.ts has one per kind). */
const REF_KINDS = {
  seqTransient: "seqTransient",
  seqSequenced: "seqSequenced",
  u32: "u32",
  epoch: "u32",
  id: "id",
  idOrNull: "idOrNull",
  format: "format",
  capabilities: "capabilities",
  errorCode: "errorCode",
  failureCode: "enum",
  json: "json",
};

const common = readJson("schema", "common.json").$defs;

function pascal(type) {
  return type.split(/[.\-_]/).map((w) => w[0].toUpperCase() + w.slice(1)).join("");
}

function loadTypes(direction) {
  const folder = join(root, "schema", direction);
  const types = {};
  for (const file of readdirSync(folder).filter((f) => f.endsWith(".json")).sort()) {
    types[file.slice(0, -5)] = JSON.parse(readFileSync(join(folder, file), "utf8"));
  }
  return types;
}

const refName = (schema) => schema.$ref?.split("/").pop();
const literal = (value) => JSON.stringify(value);

/** JSON as TypeScript, one line per row: an object or array of plain values stays on one line. */
function pretty(value, indent = "") {
  if (typeof value !== "object" || value === null) return JSON.stringify(value);
  const isArray = Array.isArray(value);
  const entries = isArray ? value.map((item) => [null, item]) : Object.entries(value);
  const flat = entries.every(([, item]) => typeof item !== "object" || item === null);
  const inner = flat ? "" : `${indent}  `;
  const parts = entries.map(([key, item]) => `${inner}${key === null ? "" : `${JSON.stringify(key)}: `}${pretty(item, inner)}`);
  const [open, close] = isArray ? ["[", "]"] : ["{", "}"];
  if (flat || parts.length === 0) return `${open}${parts.join(", ")}${close}`;
  return `${open}\n${parts.join(",\n")}\n${indent}${close}`;
}
const union = (values) => values.map(literal).join(" | ");

/** The TypeScript type of one member schema; `where` names it for ENUM_NAMES. */
function tsType(schema, where) {
  if (schema.allOf?.length === 1) return tsType(schema.allOf[0], where);
  const ref = refName(schema);
  if (ref !== undefined) return REF_TYPES[ref] ?? fail(`no TypeScript type for common.json#/$defs/${ref}`);
  if ("const" in schema) return literal(schema.const);
  if (schema.enum) return ENUM_NAMES[where] ?? union(schema.enum);
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  return types
    .map((type) => {
      switch (type) {
        case "string":
          return "string";
        case "boolean":
          return "boolean";
        case "integer":
        case "number":
          return "number";
        case "null":
          return "null";
        case "object":
          return where === "common#tool.parameters" ? "JsonSchema" : "Record<string, unknown>";
        case "array":
          return `${tsType(schema.items, where)}[]`;
        default:
          return fail(`no TypeScript type for ${JSON.stringify(schema)} (${where})`);
      }
    })
    .join(" | ");
}

function comment(text) {
  return `/** ${text} */`;
}

/** The members of an object schema, as TypeScript; `where` + name keys ENUM_NAMES. */
function members(schema, where, optional = false) {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties ?? {})
    .filter(([name]) => name !== "v" && name !== "seq")
    .map(([name, sub]) => `  ${name}${!optional && required.has(name) ? "" : "?"}: ${tsType(sub, where + name)};`);
}

/** The `then` of every if/then of a schema, nested ones included. */
function thens(schema) {
  return [...(schema.allOf ?? []), schema].filter((part) => part.then).flatMap((part) => [part.then, ...thens(part.then)]);
}

function messageType(direction, type, schema) {
  const name = MESSAGE_NAMES[direction][type] ?? pascal(type);
  const where = `${direction}/${type}#`;
  const doc = comment(schema.description);
  if ("if" in schema && "else" in schema) {
    // if/then/else on one member's value: one variant per branch (tool.result's ok).
    const [[member, { const: value }]] = Object.entries(schema.if.properties);
    if (typeof value !== "boolean") fail(`${where}: if/else on a member that is not boolean`);
    const properties = Object.fromEntries(Object.entries(schema.properties).filter(([m]) => m !== member));
    const base = members({ ...schema, properties }, where);
    const variant = (branch, v) => ["{", ...base, `  ${member}: ${v};`, ...members(branch, where), "}"].join("\n    ");
    return `${doc}\nexport type ${name} =\n  | ${variant(schema.then, value)}\n  | ${variant(schema.else, !value)};`;
  }
  // if/then on a member's value (tool.stream's phase): those members are optional.
  const conditional = thens(schema).flatMap((branch) => members(branch, where, true));
  return `${doc}\nexport interface ${name} {\n${[...members(schema, where), ...new Set(conditional)].join("\n")}\n}`;
}

/** The decoder's view of one member: its rule, and the values of an enumeration. */
function rule(name, schema, required) {
  const unique = schema.uniqueItems === true;
  if (schema.allOf?.length === 1) schema = schema.allOf[0];
  const ref = refName(schema);
  let kind;
  let values;
  if (ref !== undefined) {
    kind = REF_KINDS[ref] ?? fail(`no decoder rule for common.json#/$defs/${ref}`);
    if (kind === "enum") values = common[ref].enum;
  } else if (schema.enum) {
    kind = "enum";
    values = schema.enum;
  } else if (typeof schema.const === "string") {
    kind = "enum";
    values = [schema.const];
  } else if (schema.type === "string" || schema.type === "boolean") {
    kind = schema.type;
  } else {
    fail(`no decoder rule for member ${name}: ${JSON.stringify(schema)}`);
  }
  return { name, kind, required, ...(values ? { values } : {}), ...(unique ? { unique } : {}) };
}

function rules(schema) {
  const required = new Set(schema.required ?? []);
  const all = Object.entries(schema.properties ?? {})
    .filter(([name]) => !["v", "seq", "type"].includes(name))
    .map(([name, sub]) => rule(name, sub, required.has(name)));
  return [...all.filter((r) => r.required), ...all.filter((r) => !r.required)];
}

/** A schema's if/then rules: when a member has a value, these members (and rules nested in them). */
function conditions(schema) {
  const out = [];
  const parts = [...(schema.allOf ?? [])];
  if ("if" in schema) parts.push({ if: schema.if, then: schema.then });
  for (const part of parts) {
    if (!("if" in part)) continue;
    const [[member, { const: value }]] = Object.entries(part.if.properties);
    const nested = part.then.if ? conditions({ if: part.then.if, then: part.then.then }) : [];
    out.push({ member, value, members: rules(part.then), ...(nested.length ? { then: nested } : {}) });
  }
  return out;
}

function decoderSchema(type, schema) {
  if ("else" in schema) fail(`server/${type}: the decoder has no if/else rule`);
  const seq = rule("seq", schema.properties.seq, true).kind;
  return { seq, members: rules(schema), conditions: conditions(schema) };
}

// --- the output --------------------------------------------------------------------

export function source() {
  const server = loadTypes("server");
  const client = loadTypes("client");
  const tables = readJson("clients", "protocol-tables.json");
  const registry = readJson("capabilities.json");
  const table = tables.tables.client;
  const stateValue = (name) => (name === null ? null : table.states[name]);
  const stream = tables.toolStream;
  const phases = server["tool.stream"].properties.phase.enum;
  if (JSON.stringify(phases) !== JSON.stringify(stream.phases)) fail("schema/server/tool.stream.json's phases differ from the tables' (§7.5)");

  const out = [
    "// Generated by clients/web/tools/generate.mjs from schema/, capabilities.json and",
    "// clients/protocol-tables.json (vrt.protocol's tables) when the package is built. Do not edit.",
    "",
    "// --- message types (schema/; spec/messages.md explains each member) ---",
    "",
    comment("An audio encoding (§8.2)."),
    `export type Encoding = ${union(common.format.properties.encoding.enum)};`,
    comment(common.format.description),
    "export interface Format {",
    ...members(common.format, "common#format."),
    "}",
    comment(common.failureCode.description),
    `export type FailureCode = ${union(common.failureCode.enum)};`,
    comment("Why the client closed an epoch (§6.2)."),
    `export type InterruptReason = ${union(client.interrupt.properties.reason.enum)};`,
    comment("A turn's state (§6.1)."),
    `export type TurnStateName = ${union(server["turn.state"].properties.state.enum)};`,
    comment("The phases of a tool call (§7.5), in order."),
    `export type ToolStreamPhase = ${union(phases)};`,
    comment(common.tool.properties.parameters.description),
    "export type JsonSchema = Record<string, unknown>;",
    comment(common.tool.description),
    "export interface ToolDeclaration {",
    ...members(common.tool, "common#tool."),
    "}",
    "",
    "// server to client",
    ...Object.entries(server).map(([type, schema]) => messageType("server", type, schema)),
    comment("A message a server sends."),
    `export type ServerMessage =\n${Object.keys(server).map((t) => `  | ${MESSAGE_NAMES.server[t] ?? pascal(t)}`).join("\n")};`,
    "",
    "// client to server",
    ...Object.entries(client).map(([type, schema]) => messageType("client", type, schema)),
    comment("A message a client sends."),
    `export type ClientMessage =\n${Object.keys(client).map((t) => `  | ${MESSAGE_NAMES.client[t] ?? pascal(t)}`).join("\n")};`,
    "",
    "// --- the decoder's view of the schemas (src/codec.ts) ---",
    "",
    comment("How the decoder checks a member: one rule per kind (src/codec.ts)."),
    `export type MemberKind = ${union([...new Set(["string", "boolean", "enum", ...Object.values(REF_KINDS)])])};`,
    "export interface MemberRule {\n  readonly name: string;\n  readonly kind: MemberKind;\n  readonly required: boolean;\n  readonly values?: readonly string[];\n  readonly unique?: boolean;\n}",
    comment("When `member` has `value`, these members (and the rules in `then`) apply."),
    "export interface Condition {\n  readonly member: string;\n  readonly value: unknown;\n  readonly members: readonly MemberRule[];\n  readonly then?: readonly Condition[];\n}",
    "export interface MessageSchema {\n  readonly seq: MemberKind;\n  readonly members: readonly MemberRule[];\n  readonly conditions: readonly Condition[];\n}",
    comment("Each server message type (Appendix A) and its schema, members required first."),
    `export const SERVER_SCHEMAS: { readonly [type: string]: MessageSchema } = ${pretty(
      Object.fromEntries(Object.entries(server).map(([type, schema]) => [type, decoderSchema(type, schema)])),
    )};`,
    comment("The client's message types (§2.3: a server never sends them)."),
    `export const CLIENT_TYPES: readonly string[] = ${literal(Object.keys(client))};`,
    "",
    "// --- §5.1 client behaviour (vrt.protocol.tables.CLIENT_TABLE) ---",
    "",
    comment("The states of a client session (§5.1 \"Client state\")."),
    `export type ClientState = ${union(Object.values(table.states))};`,
    comment("What can happen to a client session."),
    "export type ClientInput =",
    ...Object.entries(table.inputs).map(([name, words]) => `  | ${literal(name)} // ${words}`),
    "  ;",
    comment("What the session does: one method per action (src/session.ts)."),
    "export type ClientAction =",
    ...Object.entries(table.actions).map(([name, words]) => `  | ${literal(name)} // ${words}`),
    "  ;",
    comment("Per state, per input: the action and the next state (null: unchanged). A missing input is a caller's bug."),
    "export const CLIENT_TABLE: {",
    "  readonly [S in ClientState]: { readonly [I in ClientInput]?: readonly [ClientAction, ClientState | null] };",
    "} = {",
    ...Object.entries(table.byState).map(
      ([state, rows]) =>
        `  ${literal(stateValue(state))}: {\n${Object.entries(rows)
          .map(([input, row]) => `    ${input}: [${literal(row.action)}, ${literal(stateValue(row.next))}],`)
          .join("\n")}\n  },`,
    ),
    "};",
    "",
    "// --- §7.5 tool-stream phases ---",
    "",
    comment("The terminal phases: nothing about the call follows them."),
    `export const TERMINAL_PHASES: readonly ToolStreamPhase[] = ${literal(stream.terminal)};`,
    "",
    "// --- codes and recommended values ---",
    "",
    comment("The error codes vrt sends (§9.1, §9.2; the set is open: receivers handle any code)."),
    `export type ErrorCode = ${union(Object.keys(tables.errorCodes))};`,
    comment("WebSocket close codes (§9.3)."),
    `export const CLOSE = ${JSON.stringify(tables.closeCodes)} as const;`,
    comment("The registered capabilities (§3.4, capabilities.json)."),
    `export const CAPABILITY = ${JSON.stringify(Object.fromEntries(registry.capabilities.map((c) => [c.token.toUpperCase().replace(/[.-]/g, "_"), c.token])))} as const;`,
    comment("§8.1: the size of a binary frame's header, and its kinds."),
    `export const HEADER_SIZE = ${tables.frames.headerSize};`,
    `export const FRAME_KIND = ${JSON.stringify(tables.frames.kinds)} as const;`,
    comment("§4.1: the last seq of a stream."),
    `export const MAX_SEQ = ${tables.streams.maxSeq};`,
    comment("§4.2 RECOMMENDED: acknowledge within this many ms of the first unacknowledged message..."),
    `export const ACK_DELAY_MS = ${tables.streams.ackDelayMs};`,
    comment("... or after this many messages, whichever comes first."),
    `export const ACK_AFTER_MESSAGES = ${tables.streams.ackAfterMessages};`,
    comment("§11: unacknowledged messages kept for resends, as the reference implementation."),
    `export const DEFAULT_MAX_KEPT = ${tables.streams.defaultMaxKept};`,
    comment("§4.4 RECOMMENDED ping interval, in milliseconds."),
    `export const PING_INTERVAL_MS = ${tables.heartbeat.pingIntervalMs};`,
    comment("§4.4: a connection silent for this many ping intervals is dead."),
    `export const DEAD_AFTER_INTERVALS = ${tables.heartbeat.deadAfterIntervals};`,
    "",
  ];
  return out.join("\n");
}

/** Write the output unless it is unchanged (its time then says when the sources changed). */
export function generate() {
  const text = source();
  if (existsSync(OUTPUT) && readFileSync(OUTPUT, "utf8") === text) return;
  mkdirSync(dirname(OUTPUT), { recursive: true });
  writeFileSync(OUTPUT, text);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) generate();
