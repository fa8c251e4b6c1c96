import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav, pcm16MonoFromWav } from "../shared/audio/wav";
import { concatPcm } from "./support/fixtures";
import { randomHex } from "./support/jobs-helpers";
import { silence } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { searchStores } from "./support/store-search";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Issue 42, the segment plane's `stream=true`: a clip long enough to be cut into pieces,
 * with a card number dictated in four groups, a pause at each cut. The audio is real
 * speech (cards/004.wav of Debian's pocketsphinx-testdata, once per group) and the
 * engine an external OpenAI-compatible server (a real local HTTP server) that hears a
 * script perfectly: for the audio of a piece it finds where in the clip the piece lies
 * and answers the words scripted there. So every piece holds a group of a Luhn-valid
 * card number, as a perfect engine would hear it, and what is tested is the service:
 * that no delta lets a group out before the number is judged whole.
 */
const GROUPS = ["my card number is four one one one", "one one one one", "one one one one", "one one one one thank you"];
const CARD = /4\D?1\D?1\D?1\D?1|\b(four|one)\b[\s,.]+\b(one)\b[\s,.]+\b(one)\b/i;
const GROUP_AUDIO = pcm16MonoFromWav(readFileSync("/usr/share/pocketsphinx/test/data/cards/004.wav"))!;
const PAUSE = 0.9;

/** The clip, and where each group's speech lies in it (samples). */
const placed: { from: number; to: number; text: string }[] = [];
const CLIP = (() => {
  const parts: Int16Array[] = [silence(0.3)];
  let at = parts[0]!.length;
  for (const [g, text] of GROUPS.entries()) {
    placed.push({ from: at, to: at + GROUP_AUDIO.length, text });
    // each group a little quieter than the one before, so no two pieces' samples are alike
    parts.push(GROUP_AUDIO.map((x) => Math.round(x * (1 - g * 0.1))), silence(PAUSE));
    at += GROUP_AUDIO.length + silence(PAUSE).length;
  }
  return concatPcm(...parts);
})();

/** The scripted words of the groups a piece of the clip holds: the piece found in the clip by its first sound. */
function hear(piece: Int16Array): string {
  const first = piece.findIndex((x) => x !== 0);
  if (first < 0) return "";
  const probe = piece.subarray(first, first + 64);
  for (let at = 0; at + probe.length <= CLIP.length; at++) {
    if (CLIP[at] !== probe[0] || !probe.every((x, i) => CLIP[at + i] === x)) continue;
    const start = at - first;
    const end = start + piece.length;
    return placed
      .filter((g) => g.from >= start && g.to <= end)
      .map((g) => g.text)
      .join(" ");
  }
  return "";
}

let stack: Stack;
let provider: ProviderServer;
let key: string;

beforeAll(async () => {
  provider = await startProviderServer("perfect-engine");
  provider.behaviour.hear = hear;
  stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", SEGMENT_SPLIT_MIN_SECONDS: "3", SEGMENT_PIECE_MAX_SECONDS: "3", SEGMENT_PIECE_MIN_SECONDS: "1" });
  key = (await stack.issueKey("pro", `pieces-${randomHex()}`)).key;
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  await provider?.close();
});

async function post(fields: Record<string, string>): Promise<Response> {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(encodeWav(CLIP, 16000))]), "card.wav");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
}

describe("stream=true with a card number spoken across the pieces' cuts (redact=pci)", () => {
  it("the clip is cut between the groups, and without redaction the deltas carry the digits", { timeout: 60_000 }, async () => {
    const res = await post({ stream: "true" });
    expect(Number(res.headers.get("x-segment-pieces"))).toBeGreaterThanOrEqual(GROUPS.length);
    const body = await res.text();
    expect(body).toMatch(/four one one one/);
    expect(provider.requests.length).toBeGreaterThanOrEqual(GROUPS.length);
  });

  it("no delta carries its digits; the deltas add up to the done text, which is the non-stream answer", { timeout: 60_000 }, async () => {
    const res = await post({ stream: "true", redact: "pci" });
    expect(res.status).toBe(200);
    const events = (await res.text())
      .split("\n\n")
      .filter((l) => l.startsWith("data: "))
      .map((l) => JSON.parse(l.slice(6)) as { type: string; delta?: string; text?: string });
    const deltas = events.filter((e) => e.type === "transcript.text.delta").map((e) => e.delta!);
    const done = events.find((e) => e.type === "transcript.text.done")!;
    console.log(`deltas: ${JSON.stringify(deltas)}\ndone: ${done.text}`);
    expect(deltas.join("")).toBe(done.text);
    // the engine formats its own text (an OpenAI-compatible server), so only redaction reshapes it
    expect(done.text).toBe("my card number is [CARD_NUMBER] thank you");
    for (const d of deltas) expect(d).not.toMatch(CARD);
    const whole = (await (await post({ response_format: "json", redact: "pci" })).json()) as { text: string };
    expect(whole.text).toBe(done.text);
  });

  it("nothing stored holds the digits", { timeout: 60_000 }, async () => {
    const { found, messages } = await searchStores(stack, (text) => (CARD.test(text) && text.includes("1111") ? ["1111"] : []));
    expect(messages).toBeGreaterThan(0);
    expect(found).toEqual([]);
  });
});
