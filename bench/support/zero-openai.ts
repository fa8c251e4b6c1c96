/**
 * A zero-cost OpenAI-compatible transcription server written the way a small real one
 * would be (hono + @hono/node-server), for bench/segment.ts's side-by-side mode: the
 * same load goes straight to it and through the service with it as the only worker.
 * POST …/audio/transcriptions parses the multipart form and reads the file, then answers
 * an empty transcript in the asked-for format; GET …/models answers at once (the
 * service's readiness probe). Prints `{"url": …}` on its first line; stops on SIGTERM.
 * Run: npx tsx bench/support/zero-openai.ts
 */
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import type { AddressInfo } from "node:net";

const app = new Hono();
app.get("*", (c) => c.json({ object: "list", data: [{ id: "whisper-1", object: "model" }] }));
app.post("*", async (c) => {
  const form = await c.req.formData();
  const file = form.get("file");
  if (file === null || typeof file === "string") return c.json({ error: { message: "file is required", type: "invalid_request_error" } }, 400);
  await file.arrayBuffer();
  if (form.get("response_format") === "verbose_json") return c.json({ task: "transcribe", language: "en", duration: 0, text: "", segments: [], words: [] });
  return c.json({ text: "", usage: { type: "duration", seconds: 0 } });
});

const server = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, (info: AddressInfo) => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${info.port}` }));
});
process.once("SIGTERM", () => server.close(() => process.exit(0)));
