import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav } from "../shared/audio/wav";
import { wordErrorRate } from "../shared/workers/wer";
import { FIXTURES_DIR, REPO_ROOT } from "./support/fixtures";
import { freePort } from "./support/ports";
import { fixture, RELAXED_ADMISSION } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * Every example in docs/quickstart.md, README.md and the planes' guides (docs/segment.md,
 * docs/jobs.md, docs/realtime.md), copied out of the page and run
 * against a started stack as a reader would run it: shell blocks with bash, JavaScript
 * blocks as an .mjs file with node (resolving `openai` and `ws` from the repository's
 * node_modules), the browser app (`js browser`) served by node and opened in Debian's
 * Chromium with jfk.wav as its microphone. The working directory stands where the
 * repository does in a reader's checkout, with `../shared` beside it (a link to the
 * fixtures' folder, wherever the clone is), so `../shared/fixtures/audio/jfk.wav` is the
 * fixture; STT_URL, STT_ADMIN_TOKEN and
 * STT_KEY point at the stack. A block tagged `no-run` (```bash no-run) is one that starts
 * the service itself or needs another machine; `setup` blocks must only succeed, every
 * other block must print jfk.wav's transcript.
 */
const PAGES = ["docs/quickstart.md", "README.md", "docs/segment.md", "docs/jobs.md", "docs/realtime.md"];
const RUNNABLE = new Set(["bash", "sh", "js", "mjs", "javascript"]);
const JFK = "and so my fellow americans ask not what your country can do for you ask what you can do for your country";
/**
 * The embedded engine's word error rate on jfk.wav: 0.2–0.5 uploaded or committed, 0.55–0.65
 * streamed at a microphone's pace (partials, then the final of each utterance); an example
 * that prints nothing, an error or another field prints a rate of 1 or more.
 */
const MAX_WER = 0.8;

interface Block {
  page: string;
  line: number;
  lang: string;
  tags: string[];
  code: string;
}

/** The fenced code blocks of a Markdown page, with the line their fence opens on. */
function codeBlocks(page: string, text: string): Block[] {
  const blocks: Block[] = [];
  let open: { line: number; lang: string; tags: string[]; body: string[] } | null = null;
  text.split("\n").forEach((line, i) => {
    const fence = /^```(.*)$/.exec(line);
    if (!open && fence) {
      const [lang = "", ...tags] = fence[1]!.trim().split(/\s+/);
      open = { line: i + 1, lang, tags, body: [] };
    } else if (open && line.startsWith("```")) {
      blocks.push({ page, line: open.line, lang: open.lang, tags: open.tags, code: open.body.join("\n") + "\n" });
      open = null;
    } else if (open) open.body.push(line);
  });
  if (open) throw new Error(`${page}: a code block opened on line ${(open as { line: number }).line} is never closed`);
  return blocks;
}

const blocks = PAGES.flatMap((page) => codeBlocks(page, readFileSync(join(REPO_ROOT, page), "utf8")));
const runnable = blocks.filter((b) => RUNNABLE.has(b.lang) && !b.tags.includes("no-run"));
const name = (b: Block) => `${b.page}:${b.line} ${b.lang}${b.tags.length ? ` ${b.tags.join(" ")}` : ""}: ${b.code.split("\n").find((l) => l.trim() && !l.startsWith("import"))?.trim().slice(0, 60)}`;

let stack: Stack;
let env: NodeJS.ProcessEnv;
let dir: string;
/** Where the examples run: `../shared` beside it is the fixtures' folder. */
let workDir: string;
let browser: Browser | undefined;

beforeAll(async () => {
  stack = await startStack({ ...RELAXED_ADMISSION, RT_STREAM_DECODERS: "2" });
  const { key } = await stack.issueKey("pro", "quickstart");
  env = { ...process.env, STT_URL: stack.baseUrl, STT_ADMIN_TOKEN: stack.adminToken, STT_KEY: key };
  dir = mkdtempSync(join(tmpdir(), "quickstart-"));
  // `import "openai"` from a file here resolves through this link, as from a reader's project
  symlinkSync(join(REPO_ROOT, "node_modules"), join(dir, "node_modules"));
  // a clone without ../shared beside it (made in a temporary folder) still has the fixtures there
  mkdirSync(join(dir, "repo"));
  symlinkSync(resolve(FIXTURES_DIR, "../.."), join(dir, "shared"));
  workDir = join(dir, "repo");
});
afterAll(async () => {
  await browser?.close().catch(() => undefined);
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command in the repository's folder until it exits (or `timeoutMs`, then kills it). */
function run(command: string, args: string[], extraEnv: NodeJS.ProcessEnv = {}, timeoutMs = 150_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: workDir, env: { ...env, ...extraEnv }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => (clearTimeout(timer), resolve({ code, stdout, stderr })));
  });
}

function runBlock(b: Block, index: number): Promise<Run> {
  if (b.lang === "bash" || b.lang === "sh") return run("bash", ["-euo", "pipefail", "-c", b.code]);
  const file = join(dir, `block-${index}.mjs`);
  writeFileSync(file, b.code);
  return run(process.execPath, [file]);
}

/** The browser app: served by node, opened in Chromium whose microphone plays jfk.wav; returns the transcripts it shows. */
async function runBrowserApp(b: Block, index: number): Promise<string> {
  const file = join(dir, `browser-${index}.mjs`);
  writeFileSync(file, b.code);
  const port = await freePort();
  const server = spawn(process.execPath, [file], { cwd: workDir, env: { ...env, PORT: String(port) }, stdio: ["ignore", "pipe", "inherit"] });
  try {
    await new Promise<void>((resolve, reject) => {
      server.stdout.on("data", (d) => String(d).includes(`:${port}`) && resolve());
      server.on("exit", (code) => reject(new Error(`the app exited ${code} before it listened`)));
    });
    // speech, then 2 s of silence so server VAD ends the turn before the fake microphone loops
    const speech = fixture("jfk.wav");
    const mic = new Int16Array(speech.length + 32000);
    mic.set(speech);
    writeFileSync(join(dir, "mic.wav"), encodeWav(mic, 16000));
    browser ??= await chromium.launch({
      executablePath: "/usr/bin/chromium",
      headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream", `--use-file-for-fake-audio-capture=${join(dir, "mic.wav")}`],
    });
    const page = await (await browser.newContext({ permissions: ["microphone"] })).newPage();
    const sockets: string[] = [];
    page.on("websocket", (ws) => sockets.push(ws.url()));
    await page.goto(`http://127.0.0.1:${port}/`);
    await page.click("#start");
    // Chromium's fake microphone loops the clip and may glitch one pass under load (a first
    // item such as "mm ends all micro"): take the best run of items from one onwards
    const deadline = Date.now() + 120_000;
    let best = { wer: Infinity, text: "" };
    while (best.wer >= MAX_WER && Date.now() < deadline) {
      const items = await page.$$eval("#final li", (lis) => lis.map((li) => li.textContent ?? ""));
      for (let from = 0; from < items.length; from++) {
        const text = items.slice(from).join(" ");
        const { wer } = wordErrorRate(JFK, text);
        if (wer < best.wer) best = { wer, text };
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    // the page never saw the key: only the ek_ secret, in a subprotocol, not in the URL
    expect(sockets.length).toBeGreaterThan(0);
    expect(sockets.every((url) => !/sk-|ek_/.test(url))).toBe(true);
    await page.context().close();
    return best.text;
  } finally {
    server.kill();
  }
}

describe("the quickstart's examples run as written", () => {
  it("finds the examples: every plane of the quickstart has one", () => {
    const quickstart = runnable.filter((b) => b.page === "docs/quickstart.md").map((b) => b.code);
    for (const needle of ["/v1/audio/transcriptions\"", "/v1/audio/transcriptions/jobs", "stream: true", "OpenAIRealtimeWS", "/v1/audio/transcriptions/stream", "client_secrets"]) {
      expect(quickstart.some((code) => code.includes(needle)), needle).toBe(true);
    }
    expect(runnable.some((b) => b.page === "README.md")).toBe(true);
  });

  it.each(runnable.map((b, i) => [name(b), b, i] as const))("%s", async (_name, b, i) => {
    if (b.tags.includes("browser")) {
      const shown = await runBrowserApp(b, i);
      console.log(`${name(b)} → ${shown}`);
      expect(wordErrorRate(JFK, shown).wer, shown).toBeLessThan(MAX_WER);
      return;
    }
    const result = await runBlock(b, i);
    console.log(`${name(b)} → exit ${result.code}: ${result.stdout.trim().slice(0, 200)}`);
    expect(result.code, `${name(b)}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`).toBe(0);
    if (b.tags.includes("setup")) return;
    expect(wordErrorRate(JFK, result.stdout).wer, `${name(b)} printed: ${result.stdout}`).toBeLessThan(MAX_WER);
  }, 180_000);
});
