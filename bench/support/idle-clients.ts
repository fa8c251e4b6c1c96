import { createInterface } from "node:readline";
import { connectRt, wsUrl, type RtClient } from "../../test/support/realtime-support";

/**
 * Idle realtime clients in a process of their own (bench/resume.ts), so the bench's
 * heap holds only the server's side of each session: opens BENCH_CLIENTS connections
 * to BENCH_URL with BENCH_KEY, prints "open", and on the line "cut" destroys every TCP
 * connection (no close frame: the server holds the sessions) and prints "cut".
 */
const n = Number(process.env.BENCH_CLIENTS ?? "100");
const clients: RtClient[] = [];
for (let i = 0; i < n; i++) {
  const c = await connectRt(wsUrl(process.env.BENCH_URL!), { authorization: `Bearer ${process.env.BENCH_KEY}` });
  await c.next("session.created");
  clients.push(c);
}
console.log("open");
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== "cut") continue;
  for (const c of clients) (c.ws as unknown as { _socket: { destroy(): void } })._socket.destroy();
  console.log("cut");
}
