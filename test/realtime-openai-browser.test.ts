import { execFileSync } from "node:child_process";
import { createServer, type Server } from "node:http";
import { type AddressInfo } from "node:net";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OPENAI_REALTIME_PATH } from "../schemas/openai-realtime";
import { fixturePath } from "./support/fixtures";
import { startStack, type Stack } from "./support/stack";
import { RELAXED_ADMISSION } from "./support/realtime-support";

/**
 * A browser app on the OpenAI Realtime door, as OpenAI documents them: its own backend
 * (here a small node server holding the API key) mints an `ek_` client secret; the page,
 * in Debian's Chromium (headless), opens `/v1/realtime` with only that secret in the
 * subprotocols `realtime, openai-insecure-api-key.ek_…`, streams jfk.wav at 24 kHz as
 * base64 appends in real time, and shows the deltas and transcripts as they arrive.
 */
let stack: Stack;
let app: Server;
let browser: Browser | undefined;

const PAGE = (door: string) => `<!doctype html><html><body>
<p id="status">starting</p><p id="live"></p><ol id="final"></ol>
<script>
(async () => {
  const status = document.getElementById("status");
  const { value } = await (await fetch("/session")).json();
  const pcm = new Uint8Array(await (await fetch("/speech.raw")).arrayBuffer());
  const ws = new WebSocket(${JSON.stringify(door)}, ["realtime", "openai-insecure-api-key." + value]);
  const b64 = (bytes) => { let s = ""; for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]); return btoa(s); };
  ws.onmessage = (m) => {
    const e = JSON.parse(m.data);
    if (e.type === "session.created") {
      status.textContent = "listening " + ws.protocol;
      let at = 0;
      const timer = setInterval(() => {
        if (at >= pcm.length) return clearInterval(timer);
        ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: b64(pcm.subarray(at, at + 4800)) }));
        at += 4800;
      }, 100);
    }
    if (e.type === "conversation.item.input_audio_transcription.delta") {
      document.getElementById("live").textContent += e.delta;
      if (!document.querySelector("#final li")) window.deltasBeforeFinal = (window.deltasBeforeFinal || 0) + 1;
    }
    if (e.type === "conversation.item.input_audio_transcription.completed") {
      const li = document.createElement("li");
      li.textContent = e.transcript;
      document.getElementById("final").appendChild(li);
      document.getElementById("live").textContent = "";
    }
    if (e.type === "error") status.textContent = "error " + e.error.code;
  };
  ws.onclose = (c) => (status.textContent = "closed " + c.code);
})();
</script></body></html>`;

beforeAll(async () => {
  // this file tests the door, not admission by headroom (domain/sessions/admission.test.ts):
  // the machine's load must not refuse its upgrades (503 "the engine cannot take another speaker")
  stack = await startStack({ RT_STREAM_DECODERS: "2", ...RELAXED_ADMISSION });
  const { key } = await stack.issueKey("pro");
  // jfk.wav at 24 kHz, then 2 s of silence so server VAD ends the turn
  const speech = Buffer.concat([execFileSync("ffmpeg", ["-v", "error", "-i", fixturePath("jfk.wav"), "-ac", "1", "-ar", "24000", "-f", "s16le", "-"]), Buffer.alloc(96000)]);
  const door = `${stack.baseUrl.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}?intent=transcription`;
  // the app's backend: the only holder of the key
  app = createServer(async (req, res) => {
    if (req.url === "/session") {
      const r = await stack.fetch("/v1/realtime/client_secrets", {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ expires_after: { anchor: "created_at", seconds: 60 }, session: { type: "transcription", audio: { input: { transcription: { language: "en" } } } } }),
      });
      res.writeHead(r.status, { "content-type": "application/json" }).end(await r.text());
    } else if (req.url === "/speech.raw") res.writeHead(200, { "content-type": "application/octet-stream" }).end(speech);
    else res.writeHead(200, { "content-type": "text/html" }).end(PAGE(door));
  });
  await new Promise<void>((r) => app.listen(0, "127.0.0.1", r));
});
afterAll(async () => {
  await browser?.close().catch(() => undefined);
  await new Promise((r) => app?.close(r));
  await stack?.stop();
});

describe("a browser app on the OpenAI Realtime door", () => {
  it("opens it with only an ek_ secret from its backend and shows live text", async () => {
    browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
    const page = await browser.newPage();
    const sockets: string[] = [];
    page.on("websocket", (ws) => sockets.push(ws.url()));
    await page.goto(`http://127.0.0.1:${(app.address() as AddressInfo).port}/`);
    await page.waitForFunction(() => document.getElementById("status")!.textContent === "listening realtime", undefined, { timeout: 20_000 });
    await page.waitForFunction(() => document.querySelectorAll("#final li").length > 0, undefined, { timeout: 90_000, polling: 250 });
    const finals = await page.$$eval("#final li", (els) => els.map((e) => e.textContent ?? ""));
    const deltasBeforeFinal = await page.evaluate(() => (window as unknown as { deltasBeforeFinal?: number }).deltasBeforeFinal ?? 0);
    console.log(`browser: ${deltasBeforeFinal} deltas shown before the first transcript; ${JSON.stringify(finals)}`);
    expect(deltasBeforeFinal).toBeGreaterThan(0);
    const words = finals.join(" ").toLowerCase().split(/\W+/);
    expect(["my", "fellow", "ask", "not", "what", "your", "country", "can", "do", "for", "you"].filter((w) => words.includes(w)).length).toBeGreaterThanOrEqual(3);
    // the page never saw the key: only the ek_ secret, in a subprotocol, never in the URL
    expect(sockets).toHaveLength(1);
    expect(sockets[0]).not.toMatch(/sk-|ek_/);
  }, 150_000);
});
