/**
 * Tool argument validation (§7.1) with `@cfworker/json-schema`, an optional peer:
 *
 *     import { jsonSchema } from "vrealtime/json-schema";
 *     const client = new VrtClient(url, { validator: jsonSchema });
 *
 * Why this validator: it interprets schemas instead of compiling them to code, so it
 * runs under a Content-Security-Policy without `unsafe-eval` (ajv's compiler needs
 * it); it implements drafts 4 to 2020-12; it has no dependencies and is a few KB
 * gzipped. Any other library fits the {@link SchemaValidator} shape.
 */

import { Validator } from "@cfworker/json-schema";
import type { SchemaValidator } from "./tools.js";

export const jsonSchema: SchemaValidator = (schema) => {
  const validator = new Validator(schema as ConstructorParameters<typeof Validator>[0], "2020-12", false);
  return (value) => {
    const result = validator.validate(value);
    if (result.valid) return null;
    const error = result.errors[result.errors.length - 1] ?? result.errors[0];
    return error ? `${error.instanceLocation.replace(/^#/, "") || "/"}: ${error.error}` : "does not match the schema";
  };
};
