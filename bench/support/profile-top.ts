/**
 * The top entries of a V8 CPU profile (`node --cpu-prof`), by self time, with the share
 * of the sampled time each takes: `npx tsx bench/support/profile-top.ts <file.cpuprofile> [n]`.
 * Functions are named `name (file:line)`, the path shortened to the repository or package.
 */
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

const [file, n = "25"] = process.argv.slice(2);
if (!file) throw new Error("usage: profile-top.ts <file.cpuprofile> [n]");
const profile = JSON.parse(readFileSync(file, "utf8")) as { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] };
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const self = new Map<string, number>();
let total = 0;
profile.samples.forEach((id, i) => {
  const dt = profile.timeDeltas[i] ?? 0;
  const frame = byId.get(id)!.callFrame;
  const where = frame.url.replace(/^.*\/node_modules\//, "").replace(/^file:\/\/.*?\/(services|shared|schemas|bench)\//, "$1/");
  const name = `${frame.functionName || "(anonymous)"} (${where || "native"}${where ? `:${frame.lineNumber + 1}` : ""})`;
  self.set(name, (self.get(name) ?? 0) + dt);
  total += dt;
});
console.log(`sampled ${(total / 1e6).toFixed(2)} s`);
for (const [name, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(n))) {
  console.log(`${((us / total) * 100).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(6)} ms  ${name}`);
}
