// The package's own scripts: every file a script of package.json names is in the
// repository, so that each `npm run` command works from a fresh checkout.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { repoRoot } from "./helpers.js";

const web = join(repoRoot(), "clients", "web");
const scripts: Record<string, string> = JSON.parse(readFileSync(join(web, "package.json"), "utf8")).scripts;

describe("package.json scripts", () => {
  for (const [name, command] of Object.entries(scripts)) {
    it(`${name}: the files it names exist`, () => {
      for (const word of command.split(/\s+|&&|;/)) {
        if (/^[\w./-]+\.(mjs|js|ts|json|py)$/.test(word)) {
          assert.ok(existsSync(join(web, word)), `npm run ${name} names ${word}, which is not in clients/web`);
        }
      }
      for (const [, other] of command.matchAll(/npm run ([\w:-]+)/g)) assert.ok(other! in scripts, `npm run ${other}`);
    });
  }
});
