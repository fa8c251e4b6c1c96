import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "./support/fixtures";

/**
 * Config is read in one place: `shared/config.ts` parses the environment into one frozen
 * object per process (docs/DEVELOPING.md, "Conventions"). Any other read of the
 * environment in services/, domain/, shared/ or schemas/ is a default nobody documents
 * or a switch nobody sees. Tests, benchmarks and scripts set up processes and may read
 * it. The import rules and file sizes are checked by scripts/check-architecture.sh.
 */
const CODE_DIRS = ["services", "domain", "shared", "schemas"];
const ALLOWED = new Set(["shared/config.ts"]);

function sourceFiles(dir: string): string[] {
  let entries;
  try {
    entries = readdirSync(join(REPO_ROOT, dir), { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((e) => {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory()) return sourceFiles(path);
    return /\.(ts|mts|cts|js|mjs)$/.test(e.name) && !/\.test\.ts$/.test(e.name) ? [path] : [];
  });
}

/** Each read of the environment in `source`: `process.env`, `process["env"]`, `{ env } = process`, `import { env } from "node:process"`, also through an alias of `process`. */
function environmentReads(fileName: string, source: string): string[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const processNames = new Set(["process"]);
  const found: string[] = [];
  const at = (node: ts.Node) => {
    const { line } = file.getLineAndCharacterOfPosition(node.getStart(file));
    found.push(`${fileName}:${line + 1}: ${node.getText(file).slice(0, 80)}`);
  };
  const isProcess = (e: ts.Expression): boolean =>
    (ts.isIdentifier(e) && processNames.has(e.text)) ||
    (ts.isPropertyAccessExpression(e) && e.name.text === "process" && ts.isIdentifier(e.expression) && e.expression.text === "globalThis");
  const bindsEnv = (p: ts.ObjectBindingPattern) => p.elements.some((el) => ((el.propertyName ?? el.name) as ts.Node).getText(file) === "env");

  // aliases first: `import process from "node:process"`, `import * as p from "process"`, `const p = process`
  const collect = (node: ts.Node) => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier) && /^(node:)?process$/.test(node.moduleSpecifier.text)) {
      const clause = node.importClause;
      if (clause?.name) processNames.add(clause.name.text);
      const bindings = clause?.namedBindings;
      if (bindings && ts.isNamespaceImport(bindings)) processNames.add(bindings.name.text);
      if (bindings && ts.isNamedImports(bindings)) for (const el of bindings.elements) if ((el.propertyName ?? el.name).text === "env") at(el);
    }
    if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.initializer && ts.isIdentifier(node.initializer) && node.initializer.text === "process") {
      processNames.add(node.name.text);
    }
    ts.forEachChild(node, collect);
  };
  collect(file);

  const visit = (node: ts.Node) => {
    if (ts.isPropertyAccessExpression(node) && node.name.text === "env" && isProcess(node.expression)) at(node);
    else if (ts.isElementAccessExpression(node) && isProcess(node.expression) && ts.isStringLiteralLike(node.argumentExpression) && node.argumentExpression.text === "env") at(node);
    else if (ts.isVariableDeclaration(node) && ts.isObjectBindingPattern(node.name) && node.initializer && isProcess(node.initializer) && bindsEnv(node.name)) at(node);
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe("the environment is read only in shared/config.ts", () => {
  it("no file in services/, domain/, shared/ or schemas/ but shared/config.ts reads process.env", () => {
    const files = CODE_DIRS.flatMap(sourceFiles);
    expect(files.length).toBeGreaterThan(100);
    const reads = files.filter((f) => !ALLOWED.has(f)).flatMap((f) => environmentReads(f, readFileSync(join(REPO_ROOT, f), "utf8")));
    expect(reads, "read the variable in shared/config.ts (and document it in docs/configuration.md)").toEqual([]);
    // and the allowed file is still where the reading happens
    expect(environmentReads("shared/config.ts", readFileSync(join(REPO_ROOT, "shared/config.ts"), "utf8")).length).toBeGreaterThan(0);
  });

  it("the check finds every way of reading it, and not its type or a comment", () => {
    const reads = (source: string) => environmentReads("x.ts", source).length;
    expect(reads("const a = process.env.X;")).toBe(1);
    expect(reads('const a = process["env"].X;')).toBe(1);
    expect(reads("const a = globalThis.process.env;")).toBe(1);
    expect(reads("const { env } = process;")).toBe(1);
    expect(reads("const { env: e, argv } = process;")).toBe(1);
    expect(reads('import { env } from "node:process";')).toBe(1);
    expect(reads('import { env as e } from "process";')).toBe(1);
    expect(reads('import p from "node:process"; p.env.X;')).toBe(1);
    expect(reads('import * as p from "process"; p["env"];')).toBe(1);
    expect(reads("const p = process; p.env;")).toBe(1);
    expect(reads("function f(e: NodeJS.ProcessEnv) { return e.X; } // process.env is read elsewhere")).toBe(0);
    expect(reads('const s = "process.env"; process.argv; process.exit(0); c.env;')).toBe(0);
  });
});
