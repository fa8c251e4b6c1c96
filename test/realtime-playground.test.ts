import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav } from "../shared/audio/wav";
import type { RealtimeGateway } from "../services/realtime-gateway/gateway";
import { cuttableProxy, launchWithFakeMic } from "./support/chromium";
import { concatPcm, REPO_ROOT } from "./support/fixtures";
import { fixture, RELAXED_ADMISSION, silence, startDemoGateway } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { JFK_WORDS, LDC_WORDS, stereoCall } from "./support/stereo";

/**
 * The playground (/playground, the page of /demo) in Debian's Chromium, headless, on the
 * real stack with the embedded engine's streaming decoders: the fake microphone loops
 * jfk.wav, files are uploaded through the page's file input and streamed at real time.
 * The page gets its credential from its backend route only (an `rt_` token, or for the
 * OpenAI door an `ek_` secret in a subprotocol), never a key.
 *
 * PLAYGROUND_SCREENSHOT=docs/playground.png writes the README's screenshot of the page
 * after its first transcripts (the first test).
 */
const JFK = "and so my fellow americans ask not what your country can do for you ask what you can do for your country";
let stack: Stack;
let gateway: RealtimeGateway;
let browser: Browser;
let dir: string;

beforeAll(async () => {
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6", RT_STREAM_DECODERS: "2", ...RELAXED_ADMISSION });
  const { key } = await stack.issueKey("pro");
  gateway = await startDemoGateway(stack, key);
  dir = mkdtempSync(join(tmpdir(), "rt-playground-"));
  const jfk = fixture("jfk.wav");
  const mic = new Int16Array(jfk.length + 32000); // a 2 s pause between the looped repeats
  mic.set(jfk);
  writeFileSync(join(dir, "mic.wav"), encodeWav(mic, 16000));
  // "three three four six nine eight two" (Debian's pocketsphinx-testdata, 16 kHz mono raw)
  const raw = readFileSync("/usr/share/pocketsphinx/test/data/numbers.raw");
  writeFileSync(join(dir, "numbers.wav"), encodeWav(new Int16Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength)), 16000));
  writeFileSync(join(dir, "call.wav"), stereoCall());
  // two people taking turns, a second between them: silero_test.wav's reader, JFK, the reader again
  const a = fixture("silero_test.wav"), b = fixture("jfk.wav"), at = (pcm: Int16Array, from: number, to: number) => pcm.subarray(from * 16_000, to * 16_000);
  writeFileSync(join(dir, "conversation.wav"), encodeWav(concatPcm(at(a, 0, 7), silence(1), b.subarray(0, 5.3 * 16_000), silence(1), at(a, 7, 14)), 16000));
  browser = await launchWithFakeMic(join(dir, "mic.wav"));
}, 120_000);
afterAll(async () => {
  await browser?.close().catch(() => undefined);
  await gateway?.stop();
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Final {
  text: string;
  label: string;
  partials: number;
  /** partials before speech_stopped: shown while the speaker talked */
  whileSpeaking: number;
  /** how many of the partials were interims (the whole running hypothesis) */
  interims: number;
  finalMs?: string;
  turnMs?: string;
  startMs: number;
  endMs: number;
}

async function open(port = gateway.port): Promise<{ page: Page; sockets: string[] }> {
  const page = await (await browser.newContext({ permissions: ["microphone"], viewport: { width: 1100, height: 760 } })).newPage();
  const sockets: string[] = [];
  page.on("websocket", (ws) => sockets.push(ws.url()));
  await page.goto(`http://127.0.0.1:${port}/playground`);
  // when partial text first showed and when the first final did, by the page's own clock
  await page.evaluate(() => {
    const seen: Record<string, number> = {};
    (window as unknown as { seen: Record<string, number> }).seen = seen;
    new MutationObserver(() => {
      if (!seen.partial && document.querySelector("#live .stable")?.textContent?.trim()) seen.partial = performance.now();
      if (!seen.final && document.querySelector("#transcripts li")) seen.final = performance.now();
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  return { page, sockets };
}

const finals = (page: Page) =>
  page.$$eval("#transcripts li:not(.failed)", (els) =>
    els.map((e) => {
      const li = e as HTMLElement;
      return { text: li.querySelector(".text")?.textContent ?? "", label: li.querySelector("b")?.textContent ?? "", partials: Number(li.dataset.partials), whileSpeaking: Number(li.dataset.whileSpeaking ?? 0), interims: Number(li.dataset.interims), finalMs: li.dataset.finalMs, turnMs: li.dataset.turnMs, startMs: Number(li.dataset.startMs), endMs: Number(li.dataset.endMs) };
    }),
  ) as Promise<Final[]>;
const statusIs = (page: Page, prefix: string, timeout = 45_000) =>
  page.waitForFunction((p) => document.getElementById("status-text")!.textContent!.startsWith(p), prefix, { timeout, polling: 100 });
const words = (s: string) => s.toLowerCase().replace(/[^a-z' ]+/g, " ").trim();
/** How many of jfk.wav's distinct words the text holds (PocketSphinx mishears some; a glitch of the fake microphone may cost a pass). */
const jfkWordsIn = (texts: Final[]) => {
  const said = new Set(words(texts.map((f) => f.text).join(" ")).split(/\s+/));
  return new Set(JFK.split(" ").filter((w) => said.has(w))).size;
};

/**
 * Waits until the page shows `finals` finals holding 3 of jfk.wav's words; gives up
 * quietly (the assertions after it say what was missing).
 */
const untilHeard = (page: Page, finals: number) =>
  page
    .waitForFunction(
      ([jfk, n]) => {
        const lis = Array.from(document.querySelectorAll("#transcripts li:not(.failed) .text"));
        const said = new Set(lis.map((e) => e.textContent ?? "").join(" ").toLowerCase().split(/[^a-z']+/));
        return lis.length >= n && new Set(jfk.split(" ").filter((w) => said.has(w))).size >= 3;
      },
      [JFK, finals] as const,
      { timeout: 90_000, polling: 250 },
    )
    .catch(() => undefined);

/** Uploads `file` and streams it through the native door with these redact entities (and toggles); the finals once the session has closed. */
async function transcribeFile(file: string, redact: string[], check: { multichannel?: boolean; smartFormatOff?: boolean; interims?: boolean; diarize?: boolean } = {}): Promise<Final[]> {
  const { page } = await open();
  await page.check("#source-file");
  await page.setInputFiles("#file", join(dir, file));
  for (const entity of redact) await page.check(`input[name=redact][value=${entity}]`);
  if (check.multichannel) await page.check("#multichannel");
  if (check.smartFormatOff) await page.uncheck("#smart-format");
  if (check.interims) await page.check("#interims");
  if (check.diarize) await page.check("#diarize");
  await page.click("#start");
  await statusIs(page, "listening", 20_000);
  await statusIs(page, "closed 1000", 90_000); // the file ends, the page closes the session
  const shown = await finals(page);
  await page.context().close();
  return shown;
}

describe("the playground in headless Chromium", () => {
  it("shows partials before each final, and each turn's timing, from the microphone (semantic_vad high)", { timeout: 150_000 }, async () => {
    const { page, sockets } = await open();
    await page.selectOption("#turn", "semantic_vad");
    await page.selectOption("#eagerness", "high");
    await page.click("#start");
    await statusIs(page, "listening", 20_000);
    await page.waitForFunction(() => document.getElementById("effective")!.textContent!.includes("semantic_vad (high)"), undefined, { timeout: 20_000 });
    // two turns at least, and the clip's words: the looping fake microphone starts anywhere
    // in the clip, and under CPU contention Chromium's capture can glitch one pass
    await untilHeard(page, 2);
    const shown = await finals(page);
    expect(shown.length).toBeGreaterThanOrEqual(2);
    const seen = await page.evaluate(() => (window as unknown as { seen: Record<string, number> }).seen);
    console.log(`playground finals: ${JSON.stringify(shown)}; partial text shown ${Math.round(seen.final! - seen.partial!)} ms before the first final`);
    expect(seen.partial).toBeLessThan(seen.final!);
    // the streaming decoder's words went out while the speaker talked, not only at the commit
    expect(shown.some((f) => f.whileSpeaking > 0), JSON.stringify(shown)).toBe(true);
    for (const f of shown) {
      expect(f.partials).toBeGreaterThan(0);
      expect(Number(f.finalMs)).toBeGreaterThanOrEqual(0);
      expect(Number(f.turnMs)).toBeGreaterThanOrEqual(0);
    }
    expect(jfkWordsIn(shown), JSON.stringify(shown)).toBeGreaterThanOrEqual(3);
    const readout = await page.$$eval("#latency tbody tr", (rows) => rows.map((r) => Array.from(r.children).map((c) => c.textContent)));
    expect(readout[0]?.[0]).toBe("semantic_vad high");
    expect(readout[0]?.[2]).toMatch(/^\d+ ms$/);
    expect(sockets[0]).toMatch(/\/v1\/audio\/transcriptions\/stream\?sample_rate=48000&access_token=rt_/);
    const screenshot = process.env.PLAYGROUND_SCREENSHOT;
    if (screenshot) {
      // a few more turns of the looping clip, and the next turn's partials on the page too
      await page.waitForFunction(() => document.querySelectorAll("#transcripts li:not(.failed)").length >= 4, undefined, { timeout: 60_000, polling: 250 }).catch(() => undefined);
      await page.waitForFunction(() => !!document.querySelector("#live .stable")?.textContent?.trim(), undefined, { timeout: 30_000, polling: 50 }).catch(() => undefined);
      const path = join(REPO_ROOT, screenshot);
      mkdirSync(dirname(path), { recursive: true });
      await page.screenshot({ path, fullPage: true });
    }
    await page.click("#stop");
    await statusIs(page, "closed 1000");
    await page.context().close();
  });

  it("redacts a spoken number when the toggle is on, and not when it is off (an uploaded file)", { timeout: 240_000 }, async () => {
    // interims asked for both times: under redaction the server sends none (they would show the words raw)
    const plain = await transcribeFile("numbers.wav", [], { interims: true });
    const redacted = await transcribeFile("numbers.wav", ["numbers"], { interims: true });
    console.log(`without redaction: ${JSON.stringify(plain.map((f) => f.text))}; with redact=numbers: ${JSON.stringify(redacted.map((f) => f.text))}`);
    const plainText = plain.map((f) => f.text).join(" ");
    const redactedText = redacted.map((f) => f.text).join(" ");
    expect(plainText).not.toContain("[NUMBER]");
    expect(plainText).toMatch(/\d|\b(one|two|three|four|five|six|seven|eight|nine|zero|oh)\b/i);
    expect(redactedText).toContain("[NUMBER]");
    expect(plain.some((f) => f.interims > 0), JSON.stringify(plain)).toBe(true);
    expect(redacted.map((f) => f.interims)).toEqual(redacted.map(() => 0));
    expect(redactedText).not.toMatch(/\d|\b(one|two|three|four|five|six|seven|eight|nine|zero|oh)\b/i);
  });

  it("gives the words as recognised, without capitals or punctuation, when smart format is off", { timeout: 120_000 }, async () => {
    const formatted = (await transcribeFile("numbers.wav", [])).map((f) => f.text).join(" ");
    const raw = (await transcribeFile("numbers.wav", [], { smartFormatOff: true })).map((f) => f.text).join(" ");
    console.log(`smart format on: ${JSON.stringify(formatted)}; off: ${JSON.stringify(raw)}`);
    expect(formatted).toMatch(/^[A-Z0-9].*[.?!]$/); // a sentence: capital (or numeral) first, a mark last
    expect(raw).toMatch(/^[a-z' ]+$/);
    expect(raw.split(" ").length).toBeGreaterThanOrEqual(3);
  });

  it("labels each channel of a stereo file transcribed per channel", { timeout: 180_000 }, async () => {
    const shown = await transcribeFile("call.wav", [], { multichannel: true });
    console.log(`stereo call: ${JSON.stringify(shown.map((f) => `${f.label}: ${f.text}`))}`);
    const on = (label: string) => words(shown.filter((f) => f.label === label).map((f) => f.text).join(" ")).split(" ");
    // each recording on its own channel, and only there
    expect(JFK_WORDS.filter((w) => on("ch 0").includes(w)).length).toBeGreaterThanOrEqual(1);
    expect(LDC_WORDS.filter((w) => on("ch 1").includes(w)).length).toBeGreaterThanOrEqual(1);
    expect(JFK_WORDS.filter((w) => on("ch 1").includes(w))).toEqual([]);
  });

  it("labels who spoke each turn of a conversation with speaker labels on (an uploaded file)", { timeout: 180_000 }, async () => {
    const shown = await transcribeFile("conversation.wav", [], { diarize: true });
    console.log(`conversation: ${JSON.stringify(shown.map((f) => `${f.startMs}-${f.endMs} ${f.label}: ${f.text}`))}`);
    expect(shown.length).toBeGreaterThanOrEqual(3);
    for (const f of shown) expect(f.label).toMatch(/^speaker \d+$/);
    // who spoke each item: the turn it overlaps most (the reader 0–7 s and 14–21 s, JFK 8–13.3 s)
    const spans = [{ who: "reader", start: 0, end: 7000 }, { who: "jfk", start: 8000, end: 13300 }, { who: "reader", start: 14300, end: 21300 }];
    const who = (f: Final) => spans.map((t) => ({ who: t.who, o: Math.min(f.endMs, t.end) - Math.max(f.startMs, t.start) })).sort((x, y) => y.o - x.o)[0]!.who;
    const labels = (w: string) => new Set(shown.filter((f) => who(f) === w).map((f) => f.label));
    expect([...labels("reader")]).toHaveLength(1);
    expect([...labels("jfk")]).toHaveLength(1);
    expect([...labels("jfk")][0]).not.toBe([...labels("reader")][0]);
  });

  it("transcribes through the OpenAI door with an ek_ secret, and resumes there when the connection drops", { timeout: 180_000 }, async () => {
    const proxy = await cuttableProxy(gateway.port);
    try {
      const { page, sockets } = await open(proxy.port);
      await page.check("#door-openai");
      expect(await page.isDisabled("#smart-format")).toBe(true); // the OpenAI protocol has no field for it
      await page.click("#start");
      await statusIs(page, "listening", 20_000);
      expect(await page.textContent("#status-text")).toContain("OpenAI door");
      await untilHeard(page, 1);
      const before = await finals(page);
      expect(jfkWordsIn(before), JSON.stringify(before)).toBeGreaterThanOrEqual(3);
      expect(before.every((f) => f.partials > 0), JSON.stringify(before)).toBe(true);
      proxy.cut();
      await statusIs(page, "resumed", 30_000);
      await page.waitForFunction((n) => document.querySelectorAll("#transcripts li:not(.failed)").length > n, before.length, { timeout: 90_000, polling: 250 });
      const log = await page.$$eval("#connection li", (els) => els.map((e) => e.textContent ?? ""));
      console.log(`OpenAI door: ${JSON.stringify((await finals(page)).map((f) => f.text))}\n${log.join("\n")}`);
      expect(log.some((l) => l.includes("connection lost (1006)"))).toBe(true);
      expect(log.some((l) => l.includes("resumed:"))).toBe(true);
      expect(sockets).toHaveLength(2);
      for (const url of sockets) {
        expect(url).toMatch(/\/v1\/realtime\?intent=transcription/);
        expect(url).not.toMatch(/sk-|ek_|rt_/); // the secret travels in a subprotocol, never in the URL
      }
      expect(sockets[1]).toMatch(/[?&]resume=rs_/);
      await page.click("#stop");
      await statusIs(page, "closed 1000");
    } finally {
      proxy.server.close();
    }
  });
});
