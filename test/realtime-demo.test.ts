import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav } from "../shared/audio/wav";
import type { RealtimeGateway } from "../services/realtime-gateway/gateway";
import { startStack, type Stack } from "./support/stack";
import { fixture, startDemoGateway } from "./support/realtime-support";
import { cuttableProxy, launchWithFakeMic } from "./support/chromium";

/**
 * The demo end to end in Debian's Chromium (headless): the page asks the demo backend
 * for a session token, opens the socket with ?access_token=, streams the fake
 * microphone (jfk.wav through --use-file-for-fake-audio-capture) and must show
 * transcript text from the embedded engine.
 */
let stack: Stack;
let gateway: RealtimeGateway;
let browser: Browser | undefined;
let dir: string;

beforeAll(async () => {
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6" });
  const { key } = await stack.issueKey("pro");
  gateway = await startDemoGateway(stack, key);
  dir = mkdtempSync(join(tmpdir(), "rt-demo-"));
  // speech then 2 s of silence, so the looping fake microphone has a pause between repeats
  const jfk = fixture("jfk.wav");
  const audio = new Int16Array(jfk.length + 32000);
  audio.set(jfk);
  writeFileSync(join(dir, "mic.wav"), encodeWav(audio, 16000));
});
afterAll(async () => {
  await browser?.close().catch(() => undefined);
  await gateway?.stop();
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const launch = () => launchWithFakeMic(join(dir, "mic.wav"));

describe("demo page in headless Chromium", () => {
  it("streams the microphone and shows live transcripts", async () => {
    browser = await launch();
    const context = await browser.newContext({ permissions: ["microphone"] });
    const page = await context.newPage();
    const sockets: string[] = [];
    page.on("websocket", (ws) => sockets.push(ws.url()));
    await page.goto(`http://127.0.0.1:${gateway.port}/demo`);
    await page.click("#start");
    await page.waitForFunction(() => document.getElementById("status-text")!.textContent!.startsWith("listening"), undefined, { timeout: 20_000 });
    const expected = ["so", "my", "fellow", "americans", "ask", "not", "what", "your", "country", "can", "do", "for", "you"];
    // The fake microphone loops the clip. Under CPU contention Chromium's capture can glitch
    // one pass (a line such as "sit ends are micro america"), so wait for the transcripts to
    // hold the speech rather than judging the first line alone.
    const heard = (words: string[]) =>
      words.filter((w) => Array.from(document.querySelectorAll("#transcripts li")).map((e) => e.textContent ?? "").join(" ").toLowerCase().split(/\W+/).includes(w)).length >= 2;
    await page.waitForFunction(heard, expected, { timeout: 90_000, polling: 250 }).catch(() => undefined);
    const lines = await page.$$eval("#transcripts li", (els) => els.map((e) => e.textContent ?? ""));
    const text = lines.join(" ").toLowerCase();
    expect(lines.length).toBeGreaterThan(0);
    expect(expected.filter((w) => text.split(/\W+/).includes(w)).length, text).toBeGreaterThanOrEqual(2);
    // the browser authenticated with a session token in the URL, never a key
    expect(sockets[0]).toMatch(/[?&]access_token=rt_/);
    expect(sockets[0]).not.toMatch(/sk-/);
    await page.click("#stop");
    await page.waitForFunction(() => document.getElementById("status-text")!.textContent!.startsWith("closed 1000"), undefined, { timeout: 45_000 });
  });

  it("reconnects by itself when the connection drops and resumes the session", async () => {
    browser ??= await launch();
    const proxy = await cuttableProxy(gateway.port);
    try {
      const page = await (await browser.newContext({ permissions: ["microphone"] })).newPage();
      const sockets: string[] = [];
      page.on("websocket", (ws) => sockets.push(ws.url()));
      await page.goto(`http://127.0.0.1:${proxy.port}/demo`);
      await page.click("#start");
      await page.waitForFunction(() => document.getElementById("status-text")!.textContent!.startsWith("listening"), undefined, { timeout: 20_000 });
      await new Promise((r) => setTimeout(r, 3000));
      proxy.cut();
      await page.waitForFunction(() => document.getElementById("status-text")!.textContent!.startsWith("resumed"), undefined, { timeout: 30_000 });
      expect(sockets).toHaveLength(2);
      expect(sockets[1]).toMatch(/[?&]resume=rs_/);
      expect(sockets[1]).toMatch(/[?&]access_token=rt_/);
      // the page shows the drop and the resume as they happen
      const log = await page.$$eval("#connection li", (els) => els.map((e) => e.textContent ?? ""));
      expect(log.some((l) => l.includes("connection lost (1006)")), log.join("\n")).toBe(true);
      expect(log.some((l) => /resumed: \d+ events caught up, audio again from [\d.]+ s/.test(l)), log.join("\n")).toBe(true);
      // transcripts keep coming on the resumed session, and it closes normally
      await page.waitForFunction(() => document.querySelectorAll("#transcripts li").length > 0, undefined, { timeout: 90_000 });
      await page.click("#stop");
      await page.waitForFunction(() => document.getElementById("status-text")!.textContent!.startsWith("closed 1000"), undefined, { timeout: 45_000 });
    } finally {
      proxy.server.close();
    }
  });
});
