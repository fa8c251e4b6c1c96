import { supervise } from "../../services/stt/supervise";
import { createLogger } from "../../shared/logger";

/**
 * `supervise()` over several children, for test/process-guard.test.ts: each argument
 * `how:runs` is a test/support/crash-child.ts run as `how` counting its starts in
 * `runs` (as `stt supervise` runs one `stt serve` per group of STT_LAYOUT).
 */
const children = process.argv.slice(2).map((arg) => {
  const [how, runs] = arg.split(":");
  return { name: how!, command: [process.execPath, "--import", "tsx", "test/support/crash-child.ts", how!, runs!] };
});
supervise({ children, logger: createLogger("info", { svc: "supervise-children" }), initialDelayMs: 100, maxCrashes: 3 }).then((code) => process.exit(code));
