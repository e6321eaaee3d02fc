/**
 * Text frames from a server to typed messages, and client messages to text (§2.2, §4.1, §9.1).
 *
 * {@link decodeServer} never throws. It classifies an invalid frame by the first rule
 * of §9.1 it breaks, exactly as the Python decoder (`vrt.protocol.codec`) does:
 *
 * 1. `MALFORMED`: not JSON, or not a JSON object;
 * 2. `UNSUPPORTED_VERSION`: `v` absent or not the number 1;
 * 3. `UNKNOWN_TYPE`: `type` absent, not a string, or not a server type (exact match);
 * 4. `INVALID_FIELD`: anything else the type's schema (`schema/server/*.json`, as
 *    `SERVER_SCHEMAS`, generated from it when the package is built) forbids,
 *    the seq class of §4.1 included, plus what a schema cannot say: a member name twice
 *    in one object (§2.2), a number beyond the double range, a string with an unpaired
 *    surrogate (neither can be passed on faithfully; docs/decisions.md).
 *
 * Rules 2 and 3 read the last occurrence of a duplicated member, as `JSON.parse` does
 * (messages.md). Limits (§11) give `LIMIT_EXCEEDED`. The language-neutral vectors in
 * `examples/server/` are run against this module by the package's tests.
 */

import { CLIENT_TYPES, MAX_SEQ, SERVER_SCHEMAS, type Condition, type MemberKind, type MemberRule } from "./gen/protocol.js";
import type { ServerMessage, ClientMessage } from "./messages.js";

export type InvalidCode =
  | "MALFORMED"
  | "UNSUPPORTED_VERSION"
  | "UNKNOWN_TYPE"
  | "INVALID_FIELD"
  | "LIMIT_EXCEEDED";

/** A frame the decoder refused: its §9.1 code (or LIMIT_EXCEEDED) and why. */
export interface Invalid {
  readonly ok: false;
  readonly code: InvalidCode;
  readonly reason: string;
  /** The message type, once rules 1-3 passed. */
  readonly type?: string;
}

/** A valid message and the seq it arrived with. */
export interface Decoded {
  readonly ok: true;
  readonly seq: number;
  readonly message: ServerMessage;
}

/** Bounds the decoder enforces (§11); the defaults are those of the Python decoder. */
export interface Limits {
  /** A text frame longer than this (UTF-16 code units) is refused before it is parsed. */
  readonly maxFrameChars: number;
  /** The message object itself is depth 1. */
  readonly maxDepth: number;
}

export const DEFAULT_LIMITS: Limits = { maxFrameChars: 1 << 20, maxDepth: 64 };

const invalid = (code: InvalidCode, reason: string, type?: string): Invalid =>
  type === undefined ? { ok: false, code, reason } : { ok: false, code, reason, type };

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);
const isInt = (x: unknown): x is number => typeof x === "number" && Number.isInteger(x);
const has = (o: object, key: string): boolean => Object.prototype.hasOwnProperty.call(o, key);

/** String length as JSON Schema counts it: in code points. */
function codePoints(s: string, atMost: number): number {
  if (s.length <= atMost) return s.length; // units >= code points
  let n = 0;
  for (const _ of s) if (++n > atMost) break;
  return n;
}

// --- member rules (schema/common.json#/$defs) -------------------------------------------

type Rule = (x: unknown) => string | null;

const u32: Rule = (x) =>
  isInt(x) && x >= 0 && x <= MAX_SEQ ? null : `must be an integer from 0 to ${MAX_SEQ}`;
const sequenced: Rule = (x) =>
  isInt(x) && x >= 1 && x <= MAX_SEQ ? null : `must be an integer from 1 to ${MAX_SEQ}`;
const transient: Rule = (x) => (x === 0 ? null : "must be 0");
const string: Rule = (x) => (typeof x === "string" ? null : "must be a string");
const boolean: Rule = (x) => (typeof x === "boolean" ? null : "must be a boolean");
const json: Rule = () => null;
const id: Rule = (x) =>
  typeof x === "string" && x.length > 0 && codePoints(x, 256) <= 256
    ? null
    : "must be a non-empty string of at most 256 characters";
const idOrNull: Rule = (x) => (x === null ? null : id(x) && "must be an id or null");
const oneOf = (values: readonly string[]): Rule => (x) =>
  typeof x === "string" && values.includes(x) ? null : `must be one of ${values.join(", ")}`;
const CAPABILITY = /^[a-z0-9]+([.-][a-z0-9]+)*$/;
const ERROR_CODE = /^[A-Z]+(_[A-Z]+)*$/;
const capabilities: Rule = (x) => {
  if (!Array.isArray(x)) return "must be an array of capability tokens";
  for (const token of x) {
    if (typeof token !== "string" || token.length > 64 || !CAPABILITY.test(token)) {
      return "holds something that is not a capability token (§3.3)";
    }
  }
  return null;
};
const unique: Rule = (x) => (Array.isArray(x) && new Set(x).size !== x.length ? "names an item twice" : null);
const format: Rule = (x) => {
  if (!isObject(x)) return "must be an audio format object";
  if (!has(x, "encoding")) return "needs encoding";
  const encoding = x["encoding"];
  if (encoding !== "pcm16" && encoding !== "pcmu" && encoding !== "opus") {
    return "encoding must be pcm16, pcmu or opus";
  }
  if (has(x, "sampleRate")) {
    const rate = x["sampleRate"];
    if (!isInt(rate) || rate < 1) return "sampleRate must be a positive integer";
    if (encoding === "pcmu" && rate !== 8000) return "pcmu is always 8000 Hz";
  }
  return null;
};
const errorCode: Rule = (x) =>
  typeof x === "string" && ERROR_CODE.test(x) ? null : "must be upper-case words joined by _";

/** The rule of each kind of member the schemas have (common.json#/$defs, plain types). */
const RULES: { readonly [K in Exclude<MemberKind, "enum">]: Rule } = {
  seqTransient: transient,
  seqSequenced: sequenced,
  u32,
  id,
  idOrNull,
  string,
  boolean,
  json,
  format,
  capabilities,
  errorCode,
};

const memberRules = new Map<MemberRule, Rule>();

/** The rule of one member of a schema, made once. */
function ruleOf(member: MemberRule): Rule {
  let rule = memberRules.get(member);
  if (rule === undefined) {
    const base = member.kind === "enum" ? oneOf(member.values ?? []) : RULES[member.kind];
    rule = member.unique ? (x) => base(x) ?? unique(x) : base;
    memberRules.set(member, rule);
  }
  return rule;
}

/** A message's members against their rules: required ones first, then those present. */
function checkMembers(value: Record<string, unknown>, members: readonly MemberRule[], missing: (name: string) => string): string | null {
  for (const member of members) {
    if (!has(value, member.name)) {
      if (member.required) return missing(member.name);
      continue;
    }
    const problem = ruleOf(member)(value[member.name]);
    if (problem) return `${member.name} ${problem}`;
  }
  return null;
}

/** The schema's if/then rules (tool.stream's members per phase, §7.5). */
function checkConditions(value: Record<string, unknown>, conditions: readonly Condition[]): string | null {
  for (const condition of conditions) {
    if (value[condition.member] !== condition.value) continue;
    const when = `${condition.member} ${String(condition.value)}`;
    const problem =
      checkMembers(value, condition.members, (name) => `${when} needs ${name}`) ??
      checkConditions(value, condition.then ?? []);
    if (problem) return problem;
  }
  return null;
}

// --- structure: duplicates, depth, values JSON.parse lets through ------------------------

const LONE_SURROGATE = /\p{Cs}/u;

interface Structure {
  members: number;
  depth: number;
  problem: string;
}

function walk(root: object, maxDepth: number): Structure {
  let members = 0;
  let depth = 0;
  let problem = "";
  const stack: Array<[unknown, number]> = [[root, 1]];
  while (stack.length > 0) {
    const [node, level] = stack.pop()!;
    if (level > depth) depth = level;
    if (depth > maxDepth) break;
    const isArray = Array.isArray(node);
    const children: unknown[] = isArray ? (node as unknown[]) : Object.values(node as object);
    if (!isArray) {
      const keys = Object.keys(node as object);
      members += keys.length;
      if (!problem && keys.some((k) => LONE_SURROGATE.test(k))) problem = "a member name with an unpaired surrogate";
    }
    for (const child of children) {
      if (typeof child === "object" && child !== null) {
        stack.push([child, level + 1]);
      } else if (!problem) {
        if (typeof child === "number" && !Number.isFinite(child)) problem = "a number beyond the range of a double";
        else if (typeof child === "string" && LONE_SURROGATE.test(child)) problem = "a string with an unpaired surrogate";
      }
    }
  }
  return { members, depth, problem };
}

const COLON = 58;
const QUOTE = 34;
const BACKSLASH = 92;

/** The number of ':' outside strings: in JSON, exactly one after each member name. */
function colonsOutsideStrings(text: string): number {
  let colons = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === COLON) colons++;
  }
  return colons;
}

function countColons(text: string): number {
  let n = 0;
  for (let i = text.indexOf(":"); i !== -1; i = text.indexOf(":", i + 1)) n++;
  return n;
}

function kind(x: unknown): string {
  if (x === null) return "null";
  if (Array.isArray(x)) return "an array";
  return typeof x === "object" ? "an object" : `a ${typeof x}`;
}

function shown(x: unknown): string {
  const text = JSON.stringify(x) ?? String(x);
  return text.length <= 40 ? text : `${text.slice(0, 37)}...`;
}

// --- decoding -------------------------------------------------------------------------

/** Decode one text frame a server sent. Never throws. */
export function decodeServer(text: string, limits: Limits = DEFAULT_LIMITS): Decoded | Invalid {
  try {
    return decode(text, limits);
  } catch (error) {
    // A defect here must not take a session down (§9.1).
    return invalid("INVALID_FIELD", `the message could not be read: ${String(error)}`);
  }
}

function decode(text: string, limits: Limits): Decoded | Invalid {
  if (text.length > limits.maxFrameChars) {
    return invalid("LIMIT_EXCEEDED", `the frame has ${text.length} characters; at most ${limits.maxFrameChars} (§11)`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return invalid("MALFORMED", `the frame is not JSON: ${(error as Error).message}`);
  }
  if (!isObject(value)) return invalid("MALFORMED", `the frame is ${kind(value)}, not a JSON object`);

  const v = value["v"];
  if (v !== 1 || !has(value, "v")) {
    const what = has(value, "v") ? shown(v) : "absent";
    return invalid("UNSUPPORTED_VERSION", `v is ${what}; this client speaks vRT major version 1 (§3.1)`);
  }
  const type = has(value, "type") ? value["type"] : undefined;
  const schema = typeof type === "string" && has(SERVER_SCHEMAS, type) ? SERVER_SCHEMAS[type] : undefined;
  if (typeof type !== "string" || schema === undefined) {
    return invalid("UNKNOWN_TYPE", unknownType(value, type));
  }

  const { members, depth, problem } = walk(value, limits.maxDepth);
  if (depth > limits.maxDepth) {
    return invalid("LIMIT_EXCEEDED", `the message nests deeper than ${limits.maxDepth} levels (§11)`, type);
  }
  // JSON.parse keeps the last of two equal names; the text then has more ':' outside
  // strings than the parsed objects have members (§2.2, messages.md).
  if (countColons(text) !== members && colonsOutsideStrings(text) !== members) {
    return invalid("INVALID_FIELD", `${type}: a member name appears twice in one object (§2.2)`, type);
  }
  if (problem) return invalid("INVALID_FIELD", `${type}: holds ${problem}, which cannot be passed on faithfully`, type);
  if (!has(value, "seq")) return invalid("INVALID_FIELD", `${type}: needs seq`, type);
  const seqProblem = RULES[schema.seq as keyof typeof RULES](value["seq"]);
  if (seqProblem) {
    return invalid("INVALID_FIELD", `${type}: seq ${shown(value["seq"])} is out of its class: it ${seqProblem} (§4.1)`, type);
  }
  const mismatch = checkMembers(value, schema.members, (name) => `needs ${name}`) ?? checkConditions(value, schema.conditions);
  if (mismatch) return invalid("INVALID_FIELD", `${type}: ${mismatch}`, type);
  return { ok: true, seq: value["seq"] as number, message: value as unknown as ServerMessage };
}

function unknownType(value: Record<string, unknown>, type: unknown): string {
  if (!has(value, "type")) return "the message has no type member (§9.1)";
  if (typeof type !== "string") return `type is ${kind(type)}, not a string (§9.1)`;
  if (CLIENT_TYPES.includes(type)) return `${JSON.stringify(type)} is a client message; a server does not send it (§2.3)`;
  return `${JSON.stringify(type)} is not a server message type of vRT v1 (§9.1)`;
}

/**
 * The compact text of a client message with its seq: `v`, `seq`, `type`, then its
 * members. Integers are written plainly; a member whose value is `undefined` is left out.
 */
export function encode(message: ClientMessage, seq: number): string {
  return JSON.stringify({ v: 1, seq, ...message });
}
