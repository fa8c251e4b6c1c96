/**
 * Embedded diarizer benchmark: `scripts/bench.sh diarization [--conversations 8] [--seed 29]
 * [--long-minutes 30] [--set changeThreshold=0.6,bicPenalty=4] [--verbose 1] [--online 1|session [--pace 1]]
 * [--online-set …] [--online-turn aggressiveness=2]`
 * (`--set`: DiarizeSettings to try; `--verbose`: one line per conversation; `--long-minutes`:
 * the one long recording at the end; `--online`: the live labels, below) (no services
 * needed but with `--online session`, which starts `stt serve` on the machine's NATS and
 * Postgres; run it under `nice -n 19` otherwise).
 *
 * Builds conversations from real recordings of different people: turns of 2–15 s (as
 * long as the speaker's material allows), 2, 3 or 4 speakers, taking turns in random
 * order with 0.1–0.8 s between turns, over a faint noise floor; once as recorded and once
 * with a channel difference (every other speaker through a 300–3400 Hz telephone band at
 * half the level). Diarizes each with the count estimated and with `speakers` given, and
 * prints the diarization error rate (10 ms grid, 0.25 s collar, optimal speaker mapping:
 * domain/diarization/der.ts) split into missed speech, false alarm and confusion, the
 * speaker-count error, and the diarizer's CPU seconds per audio second (VAD included).
 *
 * The reference is where each turn's own recording has speech (the WebRTC VAD at its
 * most aggressive on the clean recording, pauses under 0.5 s bridged), so missed speech
 * and false alarm measure the diarizer's speech regions against that.
 *
 * Speakers (docs/diarization.md, "Measured"): jfk.wav (JFK), ldc93s1.wav (a TIMIT
 * speaker), silero_test.wav (60 s, taken as one speaker: its halves' features match as
 * closely as one speaker's clips do), Debian pocketsphinx-testdata's
 * librivox/*.wav (one LibriVox reader), cards/*.wav (one speaker), numbers.raw and
 * tidigits/dhd.2934z.raw. goforward.raw and something.raw are left out: their features lie
 * as close to numbers.raw's as one speaker's clips lie to each other, so they may be the
 * same person.
 */
import { diarizePcm, type SpeakerCountHint, type SpeakerTurn } from "../domain/diarization/diarize";
import { embeddedDiarizer, pcmAudio, speechRegions } from "../domain/diarization/embedded";
import { diarizationErrorRate, type LabelledTurn } from "../domain/diarization/der";
import { createFrameClassifier } from "../shared/audio/vad-frames";
import { emptyDiarization } from "../domain/diarization/online";
import { labelItemAudio } from "../services/vad/speaker-labels";
import { loadVadEngine } from "../shared/audio/vad";
import { defaultTurnDetection } from "../schemas/realtime";
import { seededRandom, speakerMaterial, testSpeakers } from "../test/support/conversations";
import { telephone } from "../test/support/telephone";
import { RELAXED_ADMISSION } from "../test/support/realtime-support";
import { recordResults, type ResultRow } from "./support/results";
import { BenchDeployment } from "./support/deployment";
import { streamDiarized } from "./support/live-diarization";
import { stopServer } from "./support/server";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const perSetting = Number(args.get("conversations") ?? 8);
const seed = Number(args.get("seed") ?? 29);
const longMinutes = Number(args.get("long-minutes") ?? 30);
const RATE = 16_000;
/** `--name a=1,b=2` as { a: 1, b: 2 } (empty when the option is absent). */
const numbersOf = (name: string): Record<string, number> => Object.fromEntries((args.get(name) ?? "").split(",").filter(Boolean).map((kv) => [kv.split("=")[0]!, Number(kv.split("=")[1])]));
const overrides = numbersOf("set");

const SPEAKERS = testSpeakers();
const MATERIAL = SPEAKERS.map((s) => speakerMaterial(s.clips));

interface Conversation {
  pcm: Int16Array;
  reference: LabelledTurn[];
  speakers: number;
}

async function conversation(rand: () => number, count: number, channelDifference: boolean, classify: (pcm: Int16Array, aggressiveness: number) => Promise<Uint8Array>, turns = 4 * count): Promise<Conversation> {
  const chosen: number[] = [];
  while (chosen.length < count) {
    const s = Math.floor(rand() * SPEAKERS.length);
    if (!chosen.includes(s)) chosen.push(s);
  }
  const offsets = chosen.map((s) => Math.floor(rand() * MATERIAL[s]!.length));
  const pieces: { pcm: Int16Array; clean: Int16Array; speaker: number; gap: number }[] = [];
  let last = -1;
  for (let t = 0; t < turns; t++) {
    // every speaker speaks first within the first `count` turns, then any order, never twice running
    let k = t < count ? t : Math.floor(rand() * count);
    if (k === last) k = (k + 1 + Math.floor(rand() * (count - 1))) % count;
    last = k;
    const m = MATERIAL[chosen[k]!]!;
    const seconds = 2 + rand() * 13;
    const length = Math.min(Math.round(seconds * RATE), m.length);
    const piece = new Int16Array(length);
    for (let i = 0; i < length; i++) piece[i] = m[(offsets[k]! + i) % m.length]!;
    offsets[k] = (offsets[k]! + length) % m.length;
    pieces.push({ pcm: channelDifference && k % 2 === 1 ? telephone(piece) : piece, clean: piece, speaker: k, gap: Math.round((0.1 + rand() * 0.7) * RATE) });
  }
  const total = pieces.reduce((a, p) => a + p.pcm.length + p.gap, 0);
  const pcm = new Int16Array(total);
  const reference: LabelledTurn[] = [];
  let at = 0;
  for (const p of pieces) {
    pcm.set(p.pcm, at);
    for (const r of bridged(speechRegions(await classify(p.clean, 3)), 0.5)) reference.push({ start: at / RATE + r.start, end: at / RATE + r.end, speaker: SPEAKERS[chosen[p.speaker]!]!.name });
    at += p.pcm.length + p.gap;
  }
  for (let i = 0; i < pcm.length; i++) pcm[i] = Math.max(-32768, Math.min(32767, pcm[i]! + Math.round((rand() - 0.5) * 40)));
  return { pcm, reference, speakers: count };
}

function bridged(regions: { start: number; end: number }[], gap: number) {
  const out: { start: number; end: number }[] = [];
  for (const r of regions) {
    const l = out[out.length - 1];
    if (l && r.start - l.end < gap) l.end = r.end;
    else out.push({ ...r });
  }
  return out;
}

interface Tally {
  scored: number;
  missed: number;
  falseAlarm: number;
  confusion: number;
  countExact: number;
  countError: number;
  conversations: number;
  audio: number;
  cpu: number;
  /** The live labels scored against the offline diarizer's turns. */
  offlineScored: number;
  offlineError: number;
}
const empty = (): Tally => ({ scored: 0, missed: 0, falseAlarm: 0, confusion: 0, countExact: 0, countError: 0, conversations: 0, audio: 0, cpu: 0, offlineScored: 0, offlineError: 0 });

function cpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** `--online-set bicPenalty=2,glrFloor=0.3`: online settings to try. */
const onlineSettings = numbersOf("online-set");
/** `--online-turn aggressiveness=2`: the live sessions' `turn_detection` (server_vad) settings to try, sent in their `session.update` too. */
const onlineTurn = numbersOf("online-turn");
/**
 * `--online 1`: the live labels too, as a realtime session gives them (count estimated),
 * labelled in this process; `--online session`: and through a running service's
 * sessions, streamed at real time (each setting's conversations at once, one session
 * each: bench/support/live-diarization.ts).
 */
const THROUGH_SESSIONS = args.get("online") === "session";
/** `--pace 4`: the sessions' audio at 4 × real time (a quicker look; the labels do not depend on the pace). */
const pace = Number(args.get("pace") ?? 1);
type Mode = "estimated" | "given" | "online" | "session";
const MODES: readonly Mode[] = THROUGH_SESSIONS ? ["estimated", "given", "online", "session"] : args.has("online") ? ["estimated", "given", "online"] : ["estimated", "given"];

/**
 * The live labels of a realtime session (domain/diarization/online.ts): the conversation
 * cut into items by the realtime VAD at its defaults (server_vad, 500 ms of silence), each
 * item labelled as it is committed, as the service labels it (`labelItemAudio`); an
 * item's speech regions carry its label as sent.
 */
async function diarizeLive(pcm: Int16Array): Promise<SpeakerTurn[]> {
  const seg = (await loadVadEngine()).createSegmenter({ ...defaultTurnDetection, ...onlineTurn });
  let state = emptyDiarization();
  const turns: SpeakerTurn[] = [];
  try {
    const label = async (u: { audioStartMs: number; pcm: Int16Array }) => {
      const r = await labelItemAudio(state, u.pcm, onlineSettings);
      state = r.state;
      for (const t of r.turns) turns.push({ start: u.audioStartMs / 1000 + t.start, end: u.audioStartMs / 1000 + t.end, speaker: t.speaker });
    };
    for (let at = 0; at < pcm.length; at += 320) for (const e of seg.push(pcm.subarray(at, at + 320))) if (e.kind === "utterance") await label(e);
    for (const e of seg.commit("close")) if (e.kind === "utterance") await label(e);
  } finally {
    seg.close();
  }
  return turns;
}

async function main() {
  /** One clip's VAD decisions at `aggressiveness`. */
  const classify = async (pcm: Int16Array, aggressiveness: number) => {
    const vad = await createFrameClassifier(aggressiveness);
    const out = vad.classify(pcm);
    vad.free();
    return out;
  };
  // the embedded diarizer as the planes run it; with --set, the same steps with those settings
  const diarize = async (pcm: Int16Array, hint: SpeakerCountHint): Promise<SpeakerTurn[]> =>
    Object.keys(overrides).length ? diarizePcm(pcm, speechRegions(await classify(pcm, 2)), hint, overrides) : embeddedDiarizer.diarize(pcmAudio(pcm), hint);
  const service = THROUGH_SESSIONS ? await startService() : undefined;
  try {
    await run(classify, diarize, service);
  } finally {
    if (service) await service.stop();
  }
}

/** `stt serve` of a bench deployment of its own, every session admitted (this bench measures labels, not capacity), and a key per conversation of a setting. */
async function startService(): Promise<{ port: number; keys: string[]; stop(): Promise<void> }> {
  const deployment = new BenchDeployment("dz");
  const { proc, port, baseUrl } = await deployment.serve({ ...RELAXED_ADMISSION, RT_ADMIT_BURST: "1000" });
  const keys: string[] = [];
  for (let c = 0; c < perSetting; c++) keys.push(await deployment.issueKey(baseUrl, `diarization-${c}`));
  return {
    port,
    keys,
    stop: async () => {
      await stopServer(proc);
      await deployment.destroy();
    },
  };
}

async function run(
  classify: (pcm: Int16Array, aggressiveness: number) => Promise<Uint8Array>,
  diarize: (pcm: Int16Array, hint: SpeakerCountHint) => Promise<SpeakerTurn[]>,
  service: { port: number; keys: string[] } | undefined,
) {
  const rand = seededRandom(seed);
  const rows: ({ label: string; speakers: number; channel: string } & Record<Mode, Tally>)[] = [];
  for (const count of [2, 3, 4]) {
    for (const channelDifference of [false, true]) {
      const row = { label: `${count} speakers, ${channelDifference ? "channel difference" : "same channel"}`, speakers: count, channel: channelDifference ? "channel difference" : "same channel", estimated: empty(), given: empty(), online: empty(), session: empty() };
      const conversations: Conversation[] = [];
      for (let c = 0; c < perSetting; c++) conversations.push(await conversation(rand, count, channelDifference, classify));
      const streamed = service ? await Promise.all(conversations.map(async (conv, c) => streamDiarized(service.port, service.keys[c % service.keys.length]!, conv.pcm, pace, onlineTurn))) : [];
      for (const [c, conv] of conversations.entries()) {
        let offline: SpeakerTurn[] = [];
        for (const mode of MODES) {
          const started = cpuSeconds();
          const turns = mode === "session" ? streamed[c]!.turns : mode === "online" ? await diarizeLive(conv.pcm) : await diarize(conv.pcm, mode === "given" ? { speakers: count } : {});
          const cpu = mode === "session" ? 0 : cpuSeconds() - started;
          if (mode === "estimated") offline = turns as SpeakerTurn[];
          const score = diarizationErrorRate(conv.reference, turns);
          // the live labels against the offline diarizer's on the same audio (its turns as the reference)
          const againstOffline = mode === "online" || mode === "session" ? diarizationErrorRate(offline, turns) : undefined;
          if (args.has("verbose")) console.log(count, channelDifference, mode, [...new Set(conv.reference.map((r) => r.speaker))].join("+"), (score.der * 100).toFixed(1), new Set(turns.map((x) => x.speaker)).size, turns.length, mode === "session" ? JSON.stringify({ ...streamed[c]!, turns: undefined }) : "");
          const t = row[mode];
          const found = new Set(turns.map((x) => x.speaker)).size;
          Object.assign(t, {
            scored: t.scored + score.scored,
            missed: t.missed + score.missed,
            falseAlarm: t.falseAlarm + score.falseAlarm,
            confusion: t.confusion + score.confusion,
            countExact: t.countExact + (found === count ? 1 : 0),
            countError: t.countError + Math.abs(found - count),
            conversations: t.conversations + 1,
            audio: t.audio + conv.pcm.length / RATE,
            cpu: t.cpu + cpu,
            offlineScored: t.offlineScored + (againstOffline?.scored ?? 0),
            offlineError: t.offlineError + (againstOffline ? againstOffline.der * againstOffline.scored : 0),
          });
        }
      }
      rows.push(row);
    }
  }
  const pct = (x: number, of: number) => `${((100 * x) / of).toFixed(1)}%`.padStart(7);
  console.log(`seed ${seed}, ${perSetting} conversations per setting; DER with a 0.25 s collar`);
  // "vs off.": the live labels' DER against the offline diarizer's turns (count estimated) on the same audio
  console.log(`${"setting".padEnd(38)} ${"count".padEnd(9)} ${"audio s".padStart(8)} ${"DER".padStart(7)} ${"missed".padStart(7)} ${"FA".padStart(7)} ${"conf.".padStart(7)} ${"count ok".padStart(9)} ${"|Δcount|".padStart(9)} ${"CPU s/s".padStart(8)} ${"vs off.".padStart(7)}`);
  let cpu = 0;
  let audio = 0;
  const resultRows: ResultRow[] = [];
  for (const r of rows) {
    for (const mode of MODES) {
      const t = r[mode];
      // a session's labelling runs in the service: its cost is the in-process row's
      if (mode !== "session") [cpu, audio] = [cpu + t.cpu, audio + t.audio];
      const vsOffline = t.offlineScored ? Number(((100 * t.offlineError) / t.offlineScored).toFixed(1)) : undefined;
      const der = t.missed + t.falseAlarm + t.confusion;
      const share = (x: number) => Number(((100 * x) / t.scored).toFixed(1));
      resultRows.push({ speakers: r.speakers, channel: r.channel, count: mode, der_pct: share(der), missed_pct: share(t.missed), false_alarm_pct: share(t.falseAlarm), confusion_pct: share(t.confusion), count_exact: t.countExact, conversations: t.conversations, audio_s: Math.round(t.audio), ...(mode === "session" ? {} : { cpu_s_per_s: Number((t.cpu / t.audio).toFixed(4)) }), ...(vsOffline === undefined ? {} : { der_vs_offline_pct: vsOffline }) });
      console.log(
        `${r.label.padEnd(38)} ${mode.padEnd(9)} ${t.audio.toFixed(0).padStart(8)} ${pct(der, t.scored)} ${pct(t.missed, t.scored)} ${pct(t.falseAlarm, t.scored)} ${pct(t.confusion, t.scored)} ${`${t.countExact}/${t.conversations}`.padStart(9)} ${(t.countError / t.conversations).toFixed(2).padStart(9)} ${(mode === "session" ? "-" : (t.cpu / t.audio).toFixed(4)).padStart(8)} ${(vsOffline === undefined ? "" : `${vsOffline.toFixed(1)}%`).padStart(7)}`,
      );
    }
  }
  console.log(`diarizer CPU: ${(cpu / audio).toFixed(4)} CPU-s per audio second over ${audio.toFixed(0)} s`);
  recordResults("diarization", resultRows);
  // one long recording: what clustering a sample of the segments costs, and the memory held
  const long = await conversation(rand, 4, true, classify, Math.round((longMinutes * 60) / 9));
  for (const hint of [{}, { speakers: 4 }, { maxSpeakers: 6 }]) {
    const rss = process.memoryUsage().rss;
    const started = cpuSeconds();
    const turns = await diarize(long.pcm, hint);
    const cpuLong = cpuSeconds() - started;
    const score = diarizationErrorRate(long.reference, turns);
    console.log(
      `long recording, 4 speakers, channel difference, ${JSON.stringify(hint)}: ${(long.pcm.length / RATE / 60).toFixed(1)} min, DER ${(100 * score.der).toFixed(1)}% (missed ${pct(score.missed, score.scored).trim()}, FA ${pct(score.falseAlarm, score.scored).trim()}, confusion ${pct(score.confusion, score.scored).trim()}), ${new Set(turns.map((t) => t.speaker)).size} speakers found, ${(cpuLong / (long.pcm.length / RATE)).toFixed(4)} CPU-s per audio second, RSS +${((process.memoryUsage().rss - rss) / 2 ** 20).toFixed(0)} MiB`,
    );
  }
}

await main();
