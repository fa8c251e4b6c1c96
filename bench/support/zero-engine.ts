/**
 * A zero-cost OpenAI-compatible transcription server for the benches, in its own
 * process so the bench client's load does not slow it: GET /v1/models answers at once,
 * POST …/audio/transcriptions reads the upload and answers an empty verbose_json at
 * once. Prints `{"url": …}` on its first line. Run: npx tsx bench/support/zero-engine.ts
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

const server = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.writeHead(200, { "content-type": "application/json" });
    if (req.method === "GET") return res.end(JSON.stringify({ object: "list", data: [{ id: "whisper-1", object: "model" }] }));
    res.end(JSON.stringify({ task: "transcribe", language: "en", duration: 0, text: "", segments: [], words: [] }));
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })));
