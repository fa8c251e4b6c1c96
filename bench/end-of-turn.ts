/**
 * End of turn: how soon the final transcript arrives after the speaker stops, and how
 * often a turn is cut where its sentence had not ended, for silence-only turn detection
 * (server_vad at 500 ms and 200 ms) and for semantic_vad at each eagerness
 * (docs/realtime-reference.md, "Semantic end of turn").
 *
 *   nice -n 19 npx tsx bench/end-of-turn.ts [--rounds 3] [--only "500,medium"] [--group reading|commands]
 *
 * A separate `stt serve` (the embedded engine, streaming decoders) on the local NATS and
 * Postgres; one WebSocket session per setting, one after another, each streaming the same
 * conversation (bench/support/turns.ts: thirteen turns of real recorded speech with their
 * natural pauses, each followed by 2.5 s of silence: five of reading aloud, from a book,
 * a speech and a TIMIT sentence; eight spoken commands) `--rounds` times, in 20 ms frames
 * at real time, each frame sent when a microphone would hand it over (when its last
 * sample has been spoken).
 *
 * Per setting:
 * - end of speech → final: `completed` of the turn's last item received − when the frame
 *   holding the turn's last voiced sample was sent, p50/p90 over the turns;
 * - mid-sentence cuts: commits (reason vad) that end inside a turn, more than 250 ms
 *   before its end of speech (a commit at the turn's end ends ≤ 200 ms after it), and
 *   the share of turns with at least one;
 * - with semantic_vad (early_turn_events on): end of speech → turn_end_likely of the
 *   turn's last item, p50, and how many turn_end_likely were followed by turn_resumed;
 * - the word error rate of the turns' transcripts against the reference;
 * for all the turns, then for each group (`--group reading` or `commands` plays only one).
 */
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { connectRt, wsUrl, type RtClient } from "../test/support/realtime-support";
import { wordErrorRate } from "../shared/workers/wer";
import { BenchDeployment } from "./support/deployment";
import { pct, serveCommand, stopServer, waitForServer } from "./support/server";
import { conversationTurns, TURN_GAP_S, voicedStretches, type Turn } from "./support/turns";
import { loadVadEngine, type VadEngine } from "../shared/audio/vad";
import { recordResults, type ResultRow } from "./support/results";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const rounds = Number(args.get("rounds") ?? 3);
/** Labels to run (comma-separated substrings; default all). */
const only = args.get("only")?.split(",");

const ALL_SETTINGS: { label: string; turn: Record<string, unknown> }[] = [
  { label: "server_vad 500 ms", turn: { type: "server_vad", silence_duration_ms: 500 } },
  { label: "server_vad 200 ms", turn: { type: "server_vad", silence_duration_ms: 200 } },
  { label: "semantic_vad low", turn: { type: "semantic_vad", eagerness: "low", early_turn_events: true } },
  { label: "semantic_vad medium", turn: { type: "semantic_vad", eagerness: "medium", early_turn_events: true } },
  { label: "semantic_vad high", turn: { type: "semantic_vad", eagerness: "high", early_turn_events: true } },
];

const SETTINGS = ALL_SETTINGS.filter((s) => !only || only.some((o) => s.label.includes(o)));
const FRAME = 320; // 20 ms
const T = "conversation.item.input_audio_transcription";

/** A turn where it is played: from sample `at`; its speech ends at `end` as the service's VAD hears the conversation, at `alone` as it hears the clip alone. */
interface Placed {
  turn: Turn;
  at: number;
  end: number;
  alone: number;
}

/**
 * The session's audio: the turns, each followed by the gap, `rounds` times; where each
 * turn starts and where its speech ends. The end of speech is where the WebRTC VAD, with
 * the service's settings, hears the turn's last voiced frame in the conversation as
 * played (the service's own 30 ms frames, after what it heard before): where the
 * service starts counting silence. The same VAD on the clip alone puts it from 105 ms
 * earlier to 75 ms later on the reading turns, and 140–340 ms earlier on cards 001–004
 * (after seconds of digital silence it hears their tails of room noise as speech), so
 * the p50 from the clip alone's end is printed beside (docs/realtime.md, "Semantic end
 * of turn").
 */
function conversation(turns: Turn[], vad: VadEngine) {
  const gap = TURN_GAP_S * 16000;
  const starts: { turn: Turn; at: number }[] = [];
  let length = 0;
  for (let r = 0; r < rounds; r++) for (const turn of turns) starts.push({ turn, at: length }), (length += turn.pcm.length + gap);
  const pcm = new Int16Array(Math.ceil(length / FRAME) * FRAME);
  for (const p of starts) pcm.set(p.turn.pcm, p.at);
  const heard = voicedStretches(vad, pcm);
  const ends = [...heard.pauses.map(([from]) => from), heard.speechEnd];
  const placed = starts.map(({ turn, at }): Placed => {
    const alone = at + turn.speechEnd;
    const end = ends.filter((e) => e > at && e <= at + turn.pcm.length + gap / 2).at(-1) ?? alone;
    return { turn, at, end, alone };
  });
  return { pcm, placed };
}

/** Streams `pcm` in 20 ms frames at real time; returns when each frame was sent (ms since the epoch, the clock of the events' receipt `__t`). */
async function play(c: RtClient, pcm: Int16Array): Promise<number[]> {
  const sentAt: number[] = [];
  const start = Date.now();
  for (let k = 0; k * FRAME < pcm.length; k++) {
    const due = start + (k + 1) * 20;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const f = pcm.subarray(k * FRAME, (k + 1) * FRAME);
    c.sendAudio(new Uint8Array(f.buffer, f.byteOffset, f.byteLength).slice());
    sentAt.push(Date.now());
  }
  return sentAt;
}

async function runSetting(baseUrl: string, key: string, setting: (typeof SETTINGS)[number], turns: Turn[]) {
  const c = await connectRt(wsUrl(baseUrl), { authorization: `Bearer ${key}` });
  await c.next("session.created");
  c.sendJson({ type: "session.update", session: { turn_detection: setting.turn } });
  const updated = await c.next("session.updated");
  if (updated.session.turn_detection.type !== setting.turn.type) throw new Error(`${setting.label}: session.updated says ${JSON.stringify(updated.session.turn_detection)}`);
  const { pcm, placed } = conversation(turns, vad);
  const sentAt = await play(c, pcm);
  // every committed item's result, then close
  for (let t = 0; t < 300; t++) {
    const committed = c.events.filter((e) => e.type === "input_audio_buffer.committed").length;
    const done = c.events.filter((e) => e.type === `${T}.completed` || e.type === `${T}.failed`).length;
    if (committed > 0 && done >= committed) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  c.sendJson({ type: "session.close" });
  await c.closed;
  const groups = [...new Set(turns.map((t) => t.group))];
  return [
    // BENCH_DEBUG's per-turn lines once, with all the turns
    { group: "all", ...score(c.events, sentAt, placed, Boolean(process.env.BENCH_DEBUG)) },
    ...groups.map((group) => ({ group, ...score(c.events, sentAt, placed.filter((p) => p.turn.group === group), false) })),
  ];
}

function score(events: any[], sentAt: number[], placed: Placed[], debug: boolean) {
  const commits = events.filter((e) => e.type === "input_audio_buffer.committed");
  const completed = new Map(events.filter((e) => e.type === `${T}.completed`).map((e) => [e.item_id, e]));
  const latencies: number[] = [];
  const early: number[] = [];
  let midCuts = 0;
  let turnsCut = 0;
  let errors = 0;
  let words = 0;
  const fromAlone: number[] = [];
  for (const { turn, at, end: endAt, alone } of placed) {
    const from = (at * 1000) / 16000;
    const end = (endAt * 1000) / 16000;
    const mine = commits.filter((e) => e.audio_end_ms > from && e.audio_end_ms <= end + (TURN_GAP_S * 1000) / 2);
    const mid = mine.filter((e) => e.audio_end_ms < end - 250 && e.reason === "vad");
    midCuts += mid.length;
    if (mid.length) turnsCut++;
    const last = mine.at(-1);
    const final = last && completed.get(last.item_id);
    const spoken = sentAt[Math.floor((endAt - 1) / FRAME)]!;
    if (final && last.audio_end_ms >= end - 250) latencies.push(final.__t - spoken), fromAlone.push(final.__t - sentAt[Math.floor((alone - 1) / FRAME)]!);
    const likely = last && events.find((e) => e.type === "input_audio_buffer.turn_end_likely" && e.item_id === last.item_id && e.audio_end_ms >= end - 250);
    if (likely) early.push(likely.__t - spoken);
    if (debug) {
      const likelies = events.filter((e) => e.type === "input_audio_buffer.turn_end_likely" && mine.some((m) => m.item_id === e.item_id));
      console.log(
        `  ${turn.name}@${Math.round(from)}: end ${Math.round(end)} (alone ${Math.round((alone * 1000) / 16000)}); commits ${mine.map((e) => `${e.audio_end_ms}${mid.includes(e) ? "(mid)" : ""}`).join(",")}; committed ${last ? last.__t - spoken : "—"} ms, final ${final ? final.__t - spoken : "—"} ms; likely ${likelies.map((e) => `${e.audio_end_ms}:"${e.transcript.split(" ").slice(-3).join(" ")}"`).join(", ")}`,
      );
    }
    const w = wordErrorRate(turn.text, mine.map((e) => completed.get(e.item_id)?.transcript ?? "").join(" "));
    errors += w.errors;
    words += w.referenceWords;
  }
  // the early events of these turns (the audio from each turn's start to the middle of the gap after it)
  const inTurns = (ms: number) => placed.some(({ at, end }) => ms > (at * 1000) / 16000 && ms <= (end * 1000) / 16000 + (TURN_GAP_S * 1000) / 2);
  const likely = events.filter((e) => e.type === "input_audio_buffer.turn_end_likely" && inTurns(e.audio_end_ms)).length;
  const resumed = events.filter((e) => e.type === "input_audio_buffer.turn_resumed" && inTurns(e.audio_start_ms)).length;
  return { turns: placed.length, latencies, fromAlone, early, midCuts, turnsCut, errors, words, likely, resumed };
}

const turns = (await conversationTurns()).filter((t) => !args.has("group") || t.group === args.get("group"));
const vad = await loadVadEngine();
const deployment = new BenchDeployment();
console.log(`end-of-turn bench: ${turns.length} turns × ${rounds} rounds per setting, ${TURN_GAP_S} s after each turn; inner pauses (ms):`);
for (const t of turns) console.log(`  ${t.name}: ${t.pauses.map(([a, b]) => `${Math.round(a / 16)}–${Math.round(b / 16)} (${Math.round((b - a) / 16)})`).join(", ") || "none"}; speech ends at ${Math.round(t.speechEnd / 16)} ms`);
const proc = spawn(...serveCommand(), {
  env: {
    ...process.env,
    ...deployment.env({
      LOG_LEVEL: process.env.BENCH_SERVER_LOG ? "debug" : "info",
      // one session at a time needs one decoder (two: the next item's is loaded while one ends)
      RT_STREAM_DECODERS: "2",
      RT_STREAM_DECODERS_WARM: "2",
    }),
  },
  stdio: ["ignore", "pipe", "pipe"],
});
// BENCH_SERVER_LOG=<file>: the server's log (at debug level: each end-of-turn decision) goes there too
if (process.env.BENCH_SERVER_LOG) {
  const file = createWriteStream(process.env.BENCH_SERVER_LOG);
  proc.stdout!.pipe(file);
  proc.stderr!.pipe(file);
}
try {
  const port = await waitForServer(proc);
  const baseUrl = `http://127.0.0.1:${port}`;
  const key = await deployment.issueKey(baseUrl, "bench-eot");
  await new Promise((r) => setTimeout(r, 8000)); // the decoders load their models (0.44 CPU-s each on a shared machine)
  // one session at a time (a voice agent's one speaker), so the settings do not share the decoders' CPU
  const results: Awaited<ReturnType<typeof runSetting>>[] = [];
  for (const s of SETTINGS) results.push(await runSetting(baseUrl, key, s, turns));
  const ms = (xs: number[], p: number) => (xs.length ? `${Math.round(pct(xs, p))}` : "—");
  console.log("setting | end of speech → final p50/p90 (ms) (p50 from the clip alone's end) | finals | mid-sentence cuts | turns cut mid-sentence | → turn_end_likely p50 (ms) | likely / resumed | WER");
  // all the turns first, then each group (reading: the book and the speeches; commands: PocketSphinx's test utterances)
  const rows: ResultRow[] = [];
  for (const group of results[0]!.map((g) => g.group)) {
    console.log(`turns: ${group}`);
    SETTINGS.forEach((s, i) => {
      const r = results[i]!.find((g) => g.group === group)!;
      const wer = ((100 * r.errors) / r.words).toFixed(1);
      const p = (xs: number[], q: number) => (xs.length ? Math.round(pct(xs, q)) : null);
      rows.push({ group, setting: s.label, final_p50_ms: p(r.latencies, 50), final_p90_ms: p(r.latencies, 90), finals: r.latencies.length, turns: r.turns, mid_cuts: r.midCuts, turns_cut: r.turnsCut, turn_end_likely_p50_ms: p(r.early, 50), likely: r.likely, resumed: r.resumed, wer_pct: Number(wer) });
      console.log(
        `${s.label} | ${ms(r.latencies, 50)} / ${ms(r.latencies, 90)} (${ms(r.fromAlone, 50)}) | ${r.latencies.length}/${r.turns} | ${r.midCuts} | ${r.turnsCut}/${r.turns} (${Math.round((100 * r.turnsCut) / r.turns)}%) | ${ms(r.early, 50)} | ${r.likely} / ${r.resumed} | ${wer}% (${r.errors}/${r.words})`,
      );
    });
  }
  recordResults("end-of-turn", rows);
} finally {
  await stopServer(proc);
  await deployment.destroy();
}
process.exit(0);
