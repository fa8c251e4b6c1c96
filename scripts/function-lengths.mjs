#!/usr/bin/env node
// The function-length rules of scripts/check-architecture.sh, read with the TypeScript
// compiler's own parser (a dependency already) rather than by pattern:
//   - in services/ and domain/, no function whose own body is over OWN_MAX lines; a
//     function's own lines are its span less the lines of the functions nested in it
//     (a closure that returns handlers is judged by what it does itself, each handler
//     on its own);
//   - in services/realtime-gateway/, no function over WHOLE_MAX lines, nested ones
//     included (one closure holding a connection's whole life is what the rule stops).
// Unit tests beside the code are not checked. Prints each offender as
// `file:line name N lines` and exits 1 if there is any.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";

const OWN_MAX = 100;
const WHOLE_MAX = 150;
const OWN_ROOTS = ["services", "domain"];
const WHOLE_ROOTS = ["services/realtime-gateway"];

const root = join(import.meta.dirname, "..");

function sourceFiles(dir) {
  let entries;
  try {
    entries = readdirSync(join(root, dir));
  } catch {
    return [];
  }
  return entries.flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(root, path)).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") && !name.endsWith(".test.ts") && !name.endsWith(".d.ts") ? [path] : [];
  });
}

function isFunction(node) {
  return (
    ts.isFunctionDeclaration(node) ||
    ts.isFunctionExpression(node) ||
    ts.isArrowFunction(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node) ||
    ts.isConstructorDeclaration(node)
  );
}

/** The name a reader finds the function by: its own, the variable or property it is assigned to, or the call it is passed to. */
function nameOf(node, sf) {
  if (node.name && !ts.isComputedPropertyName(node.name)) return node.name.getText(sf);
  if (ts.isConstructorDeclaration(node)) return "constructor";
  const parent = node.parent;
  if ((ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) && parent.name) return parent.name.getText(sf);
  if (ts.isCallExpression(parent)) return `(callback of ${parent.expression.getText(sf).slice(0, 40)})`;
  return "(anonymous)";
}

const lineOf = (sf, pos) => sf.getLineAndCharacterOfPosition(pos).line;

const ownOffenders = [];
const wholeOffenders = [];
for (const file of [...new Set(OWN_ROOTS.flatMap(sourceFiles))].sort()) {
  const sf = ts.createSourceFile(file, readFileSync(join(root, file), "utf8"), ts.ScriptTarget.Latest, true);
  const whole = WHOLE_ROOTS.some((r) => file === r || file.startsWith(`${r}/`));
  const visit = (node) => {
    if (isFunction(node)) {
      const first = lineOf(sf, node.getStart(sf));
      const last = lineOf(sf, node.getEnd());
      const span = last - first + 1;
      // lines that belong to a nested function: after its first line (which holds this function's code too) to its last
      const nested = new Set();
      const mark = (child) => {
        if (isFunction(child)) {
          const from = lineOf(sf, child.getStart(sf));
          const to = lineOf(sf, child.getEnd());
          for (let l = from + 1; l <= to; l++) nested.add(l);
          return;
        }
        ts.forEachChild(child, mark);
      };
      ts.forEachChild(node, mark);
      const own = span - nested.size;
      const name = nameOf(node, sf);
      if (own > OWN_MAX) ownOffenders.push(`${file}:${first + 1} ${name} ${own} lines`);
      if (whole && span > WHOLE_MAX) wholeOffenders.push(`${file}:${first + 1} ${name} ${span} lines`);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}

if (ownOffenders.length > 0) {
  console.error(`functions whose own body is over ${OWN_MAX} lines, nested functions aside (split them by what they do):`);
  for (const o of ownOffenders) console.error(`  ${o}`);
}
if (wholeOffenders.length > 0) {
  console.error(`functions over ${WHOLE_MAX} lines in services/realtime-gateway, nested functions included (a decider's effects, not a closure's flags: domain/sessions/connection.ts):`);
  for (const o of wholeOffenders) console.error(`  ${o}`);
}
if (ownOffenders.length + wholeOffenders.length > 0) process.exit(1);
