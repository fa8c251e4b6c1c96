/**
 * Prosody at the pauses of the end-of-turn bench (docs/realtime.md, "Semantic end of
 * turn"): for every pause the WebRTC VAD finds in the bench's conversation
 * (bench/support/turns.ts) and in the other labelled speech on the machine, the pitch and
 * energy of the last voiced audio before it, next to the language model's verdict on the
 * running hypothesis there. Offline, no server: a question of whether the evidence
 * separates turn ends from mid-sentence pauses at all.
 *
 *   nice -n 19 npx tsx bench/end-of-turn-prosody.ts [--no-lm]
 */
import { readFileSync } from "node:fs";
import { trackPitch } from "../shared/audio/pitch";
import { loadVadEngine } from "../shared/audio/vad";
import { pcm16MonoFromWav } from "../shared/audio/wav";
import { createStreamDecoderPool, type StreamDecoderPool } from "../services/vad/stream-decoders";
import { judgeProsody, pauseProsody, REFERENCE_MS } from "../domain/sessions/prosody";
import { conversationTurns, pocketsphinxRaw, POCKETSPHINX_DATA, voicedStretches } from "./support/turns";
import { fixturePath } from "../test/support/fixtures";

const PS = POCKETSPHINX_DATA;

interface Clip {
  set: "bench" | "wider";
  name: string;
  pcm: Int16Array;
  /** Labels of the inner pauses in order ("mid", "end", "?"), and of the end. */
  inner: (i: number) => string;
  end: string;
}

const vad = await loadVadEngine();
const clips: Clip[] = [];
for (const t of await conversationTurns()) {
  // the bench: every inner pause is inside a turn (mid-sentence); "0880+0890" and "0920+0930" end on a colon and a semicolon, where the reader yields
  clips.push({ set: "bench", name: t.name, pcm: t.pcm, inner: () => "mid", end: "end" });
}
// the wider set: single utterances read or spoken alone (each end is a turn end); cards 005 is a list ("eight of spades, four of clubs, seven of hearts")
for (const n of ["001", "002", "003", "004", "005"]) clips.push({ set: "wider", name: `cards/${n}`, pcm: pcm16MonoFromWav(readFileSync(`${PS}/cards/${n}.wav`))!, inner: () => (n === "005" ? "mid" : "?"), end: "end" });
for (const n of ["goforward", "numbers", "something"]) clips.push({ set: "wider", name: n, pcm: pocketsphinxRaw(`${n}.raw`), inner: () => "?", end: "end" });
clips.push({ set: "wider", name: "tidigits", pcm: pocketsphinxRaw("tidigits/dhd.2934z.raw"), inner: () => "?", end: "end" });
// the clips that the bench joins, alone: 0880 ends on "young man," (mid), 0920 on "than he was:—" (mid)
const LIBRI = `${PS}/librivox/sense_and_sensibility_01_austen_64kb-`;
for (const [n, end] of [["0880", "mid"], ["0920", "mid"], ["0890", "end"], ["0930", "end"]] as const) clips.push({ set: "wider", name: n, pcm: pcm16MonoFromWav(readFileSync(`${LIBRI}${n}.wav`))!, inner: () => "mid", end });
clips.push({ set: "wider", name: "silero_test", pcm: pcm16MonoFromWav(readFileSync(fixturePath("silero_test.wav")))!, inner: () => "?", end: "?" });

const pool: StreamDecoderPool | null = process.argv.includes("--no-lm") ? null : await createStreamDecoderPool({ size: 1, warm: 1 });

console.log("set | clip | pause at (ms) | pause (ms) | kind | voiced frames | final F0 (Hz) | level (st vs median of the last 1.5 s) | percentile | slope (st/s, last 250 ms) | fall from peak (st, last 400 ms) | energy slope (dB/s, last 200 ms) | pitch says | LM eos | last words");
for (const c of clips) {
  const { speechEnd, pauses } = voicedStretches(vad, c.pcm);
  const points = [...pauses.map(([a, b], i) => ({ at: a, len: b - a, kind: c.inner(i) })), { at: speechEnd, len: Infinity, kind: c.end }];
  const utt = pool?.acquire({ prompt: null, cmn: null }) ?? null;
  let fed = 0;
  for (const p of points) {
    // as the VAD does it: the last REFERENCE_MS before the pause (or the clip's start)
    const from = Math.max(0, p.at - REFERENCE_MS * 16);
    const f = pauseProsody(trackPitch(c.pcm.subarray(from, p.at)), p.at - from);
    let lm = "";
    if (utt) {
      const upTo = Math.min(c.pcm.length, p.at + 1440); // 90 ms of the pause heard, as the VAD reads it
      utt.feed(c.pcm.subarray(fed, upTo));
      fed = upTo;
      const h = await utt.hypothesis();
      lm = `${h.endOfSentence?.toFixed(2) ?? "—"} | ${h.text.split(" ").slice(-3).join(" ")}`;
    }
    const n = (x: number | null, d = 1) => (x === null ? "—" : x.toFixed(d));
    console.log(
      `${c.set} | ${c.name} | ${Math.round(p.at / 16)} | ${p.len === Infinity ? "end" : Math.round(p.len / 16)} | ${p.kind} | ${f.voicedFrames} | ${n(f.finalHz, 0)} | ${n(f.levelSt)} | ${n(f.percentile, 2)} | ${n(f.slopeStPerS, 0)} | ${n(f.fallSt)} | ${n(f.energySlopeDbPerS, 0)} | ${judgeProsody(f)} | ${lm}`,
    );
  }
  if (utt) await utt.end();
}
await pool?.close();
process.exit(0);
