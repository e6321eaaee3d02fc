/** Client tools (§7): declarations, handlers, failure codes, argument validation. */

import type { FailureCode, JsonSchema, ToolDeclaration } from "./messages.js";

/** What a tool may ask for about the call (§7.1). */
export interface ToolContext {
  /** Aborted when the call's epoch closes (§7.2). Check it before committing an effect. */
  readonly signal: AbortSignal;
  readonly callId: string;
  readonly turnId: string;
  readonly epoch: number;
}

/** A tool's code: its return value is the output (`undefined` gives `null`). */
export type ToolHandler<A = any> = (args: A, context: ToolContext) => unknown;

/** Throw from a tool to answer with a specific failure code (§7.3), e.g. REJECTED. */
export class ToolError extends Error {
  constructor(
    readonly code: FailureCode,
    message: string,
  ) {
    super(message);
    this.name = "ToolError";
  }
}

/**
 * Compiles a JSON Schema into a check that returns why a value does not match it, or
 * null when it does. `vrealtime/json-schema` provides one; any other library fits.
 */
export type SchemaValidator = (schema: JsonSchema) => (value: unknown) => string | null;

export interface ToolOptions {
  description?: string;
  /** A JSON Schema of the arguments; absent means any arguments. */
  parameters?: JsonSchema;
}

export interface RegisteredTool {
  declaration: ToolDeclaration;
  handler: ToolHandler;
  check: ((value: unknown) => string | null) | null;
}

const TOOL_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

export function registerTool(
  name: string,
  options: ToolOptions,
  handler: ToolHandler,
  validator: SchemaValidator | undefined,
): RegisteredTool {
  if (!TOOL_NAME.test(name)) throw new Error(`tool name ${JSON.stringify(name)} must match ${TOOL_NAME} (§5.2)`);
  const declaration: ToolDeclaration = { name };
  if (options.description !== undefined) declaration.description = options.description;
  if (options.parameters !== undefined) declaration.parameters = options.parameters;
  const check = options.parameters !== undefined && validator !== undefined ? validator(options.parameters) : null;
  return { declaration, handler, check };
}
