/**
 * VAD segmenter benchmark: `npx tsx bench/vad.ts [--sessions 1000] [--seconds 20]` (no
 * services needed).
 *
 * Feeds the realtime bench's audio (jfk.wav looped with 1.5 s pauses, each session at
 * its own offset) through one segmenter per session in 40 ms pieces, as the VAD process
 * reads them from a partition, and prints the CPU time per piece and per session-second,
 * beside the WebRTC VAD's own cost (the same 30 ms frames classified with nothing
 * around them). The difference is the segmenter's work: buffering, the start window,
 * the utterances it cuts.
 */
import { readFileSync } from "node:fs";
import { loadVadEngine, type VadSegmenter } from "../shared/audio/vad";
import { defaultTurnDetection } from "../schemas/realtime";
import { pcm16MonoFromWav } from "../shared/audio/wav";
import { fixturePath } from "../test/support/fixtures";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const sessions = Number(args.get("sessions") ?? 1000);
const seconds = Number(args.get("seconds") ?? 20);
const PIECE = 640; // 40 ms at 16 kHz

const jfk = pcm16MonoFromWav(readFileSync(fixturePath("jfk.wav")))!;
const loop = new Int16Array(jfk.length + 24_000);
loop.set(jfk);

function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

async function main() {
  const engine = await loadVadEngine();
  const segs: VadSegmenter[] = [];
  const offsets: number[] = [];
  for (let i = 0; i < sessions; i++) {
    segs.push(engine.createSegmenter(defaultTurnDetection));
    offsets.push(Math.floor(Math.random() * (loop.length / PIECE)) * PIECE);
  }
  const piecesPerSession = Math.floor((seconds * 16000) / PIECE);
  let utterances = 0;
  // warm-up: a second of audio per session, not timed
  const run = (pieces: number, from: number) => {
    for (let k = from; k < from + pieces; k++) {
      for (let i = 0; i < sessions; i++) {
        const at = (offsets[i]! + k * PIECE) % (loop.length - PIECE);
        for (const e of segs[i]!.push(loop.subarray(at, at + PIECE))) if (e.kind === "utterance") utterances++;
      }
    }
  };
  run(25, 0);
  utterances = 0;
  const t0 = cpuMs();
  run(piecesPerSession, 25);
  const segMs = cpuMs() - t0;
  for (const s of segs) s.close();

  // the WebRTC VAD alone: the same number of 30 ms frames, one state per session
  const frames = Math.floor((piecesPerSession * PIECE) / 480);
  const fvad = await bareClassifier();
  const t1 = cpuMs();
  for (let k = 0; k < frames; k++) {
    for (let i = 0; i < sessions; i++) {
      const at = (offsets[i]! + k * 480) % (loop.length - 480);
      fvad.classify(i, loop.subarray(at, at + 480));
    }
  }
  const vadMs = cpuMs() - t1;
  const n = piecesPerSession * sessions;
  console.log(`vad bench: ${sessions} sessions × ${seconds} s, 40 ms pieces, ${utterances} utterances`);
  console.log(`segmenter: ${((segMs * 1000) / n).toFixed(2)} µs per 40 ms piece, ${((segMs / (sessions * seconds)) * 10).toFixed(2)}% of a core per 100 sessions`);
  console.log(`WebRTC VAD alone: ${((vadMs * 1000) / n).toFixed(2)} µs per 40 ms of audio (${((vadMs * 1000) / (frames * sessions)).toFixed(2)} µs per 30 ms frame)`);
  console.log(`around the VAD: ${(((segMs - vadMs) * 1000) / n).toFixed(2)} µs per piece`);
}

/** fvad states, one per session, classifying frames with nothing else around them. */
async function bareClassifier() {
  const { default: createFvadModule } = await import("@echogarden/fvad-wasm");
  const m = (await (createFvadModule as unknown as () => Promise<{
    _fvad_new(): number;
    _fvad_set_mode(h: number, mode: number): number;
    _fvad_set_sample_rate(h: number, rate: number): number;
    _fvad_process(h: number, frame: number, length: number): number;
    _malloc(bytes: number): number;
    HEAP16: Int16Array;
  }>)());
  const frame = m._malloc(960);
  const handles: number[] = [];
  for (let i = 0; i < sessions; i++) {
    const h = m._fvad_new();
    m._fvad_set_sample_rate(h, 16000);
    m._fvad_set_mode(h, defaultTurnDetection.aggressiveness);
    handles.push(h);
  }
  return {
    classify(i: number, samples: Int16Array) {
      m.HEAP16.set(samples, frame >> 1);
      return m._fvad_process(handles[i]!, frame, 480) === 1;
    },
  };
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
