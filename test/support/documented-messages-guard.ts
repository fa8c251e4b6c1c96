import { afterAll, afterEach } from "vitest";
import { checkReceivedMessages, takeProblems } from "./documented-messages";

/**
 * Setup file of the integration project (vitest.config.ts): a realtime test in which
 * the gateway sent a message /asyncapi.json does not describe fails, naming it
 * (documented-messages.ts). Messages that arrive after the file's last test (a socket
 * closing in afterAll) fail the file.
 */
checkReceivedMessages();

const fail = () => {
  const problems = takeProblems();
  if (problems.length) throw new Error(`the gateway sent ${problems.length} message(s) /asyncapi.json does not describe:\n${problems.slice(0, 10).join("\n")}`);
};
afterEach(fail);
afterAll(fail);
