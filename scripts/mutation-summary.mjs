// Per-file mutation scores from Stryker's JSON report (mutation-testing-report-schema),
// and each surviving mutant as file:line with its replacement, so a survivor can be
// found and a test written that kills it.
import { readFileSync } from "node:fs";

const report = JSON.parse(readFileSync(process.argv[2] ?? "reports/mutation/mutation.json", "utf8"));
const detected = new Set(["Killed", "Timeout"]);
const counted = new Set(["Killed", "Timeout", "Survived", "NoCoverage"]);
let killed = 0;
let total = 0;
const survivors = [];
console.log("mutation score (killed or timed out / all valid mutants):");
for (const [file, { mutants }] of Object.entries(report.files).sort()) {
  const valid = mutants.filter((m) => counted.has(m.status));
  const k = valid.filter((m) => detected.has(m.status)).length;
  killed += k;
  total += valid.length;
  const score = valid.length ? ((100 * k) / valid.length).toFixed(1) : "n/a";
  console.log(`  ${file.padEnd(48)} ${String(k).padStart(4)} / ${String(valid.length).padEnd(4)} ${score}%`);
  for (const m of valid.filter((m) => !detected.has(m.status))) {
    survivors.push(`  ${m.status.padEnd(10)} ${file}:${m.location.start.line} ${m.mutatorName}: ${JSON.stringify(m.replacement ?? "")}`);
  }
}
console.log(`  ${"total".padEnd(48)} ${String(killed).padStart(4)} / ${String(total).padEnd(4)} ${total ? ((100 * killed) / total).toFixed(1) : "n/a"}%`);
if (survivors.length) console.log(`surviving mutants:\n${survivors.join("\n")}`);
