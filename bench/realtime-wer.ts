/**
 * Word error rate of the realtime plane's finals, streamed against the commit path, on
 * the same labelled clips (issue 10: "within 2 points"). One stack streams (the
 * default), one has RT_STREAM_DECODERS=0 (every utterance goes commit → transcribe).
 * Audio is paced at BENCH_SPEED × real time in 20 ms frames; each clip is followed by
 * 1.5 s of silence; the `completed` transcripts of a clip, in order, are its hypothesis.
 *
 * Two groupings of the same clips:
 * - one session per clip: every clip is a session's first utterance (a cold start for
 *   the streamed decoder's CMN);
 * - one session per speaker: the five LibriVox clips (one reader) in one session, in
 *   order, as a conversation is; jfk and ldc93s1 a session each.
 *
 * Run: npx tsx bench/realtime-wer.ts   (BENCH_DEBUG=1 prints references and hypotheses;
 * BENCH_PARTIAL_MS sets partial_interval_ms)
 */
import { connectRt, silence, streamPcm, wsUrl } from "../test/support/realtime-support";
import { startStack } from "../test/support/stack";
import { wordErrorRate } from "../shared/workers/wer";
import { labelledClips } from "./support/clips";

type Clip = Awaited<ReturnType<typeof labelledClips>>[number];
type Mode = "streamed" | "commit path";

const speed = Number(process.env.BENCH_SPEED ?? 2);
const clips = await labelledClips();
const perClip = clips.map((c) => [c]);
const perSpeaker = [clips.filter((c) => c.name.startsWith("sense_")), ...clips.filter((c) => !c.name.startsWith("sense_")).map((c) => [c])];

/** Waits (up to 10 s) until every committed item has its completed or failed event. */
async function settled(events: { type: string }[]) {
  const count = (suffix: string) => events.filter((e) => e.type.endsWith(suffix)).length;
  for (let t = 0; t < 100 && count("buffer.committed") > count("transcription.completed") + count("transcription.failed"); t++) await new Promise((r) => setTimeout(r, 100));
}

/** One session per group; returns errors and reference words over all clips. */
async function score(stack: Awaited<ReturnType<typeof startStack>>, key: string, mode: Mode, groups: Clip[][], label: string) {
  let errors = 0;
  let words = 0;
  for (const group of groups) {
    const rt = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = await rt.next("session.created");
    if ((created.input_audio_transcription?.streaming ?? false) !== (mode === "streamed")) throw new Error(`${mode}: session.created says streaming=${created.input_audio_transcription?.streaming}`);
    if (process.env.BENCH_PARTIAL_MS) {
      rt.sendJson({ type: "session.update", session: { input_audio_transcription: { partial_interval_ms: Number(process.env.BENCH_PARTIAL_MS) } } });
      await rt.next("session.updated");
    }
    const bounds: number[] = [];
    for (const c of group) {
      await streamPcm(rt, c.pcm, { speed, chunkBytes: 640 });
      await streamPcm(rt, silence(1.5), { speed, chunkBytes: 640 });
      // the clip's items are those committed so far (the 1.5 s of silence ends its last one)
      await settled(rt.events);
      bounds.push(rt.events.length);
    }
    rt.sendJson({ type: "session.close" });
    await rt.closed;
    group.forEach((c, i) => {
      const finals = rt.events.slice(i ? bounds[i - 1] : 0, bounds[i]).filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
      const w = wordErrorRate(c.ref, finals.map((e) => e.transcript).join(" "));
      errors += w.errors;
      words += w.referenceWords;
      console.log(`  ${label}, ${mode}, ${c.name}: ${finals.length} items, ${w.errors}/${w.referenceWords} errors`);
      if (process.env.BENCH_DEBUG) console.log(`    ref: ${c.ref}\n    hyp: ${finals.map((e) => e.transcript).join(" | ")}`);
    });
  }
  return { errors, words };
}

async function run(mode: Mode) {
  const n = mode === "streamed" ? "4" : "0";
  const stack = await startStack({ RT_STREAM_DECODERS: n, RT_STREAM_DECODERS_WARM: n, LOG_LEVEL: "error" });
  try {
    const { key } = await stack.issueKey("pro", "wer");
    return { clip: await score(stack, key, mode, perClip, "per clip"), speaker: await score(stack, key, mode, perSpeaker, "per speaker") };
  } finally {
    await stack.stop();
  }
}

const commit = await run("commit path");
const streamed = await run("streamed");
const pct = (r: { errors: number; words: number }) => `${((100 * r.errors) / r.words).toFixed(1)}% (${r.errors}/${r.words})`;
const diff = (a: { errors: number; words: number }, b: { errors: number; words: number }) => ((100 * (a.errors - b.errors)) / a.words).toFixed(1);
console.log("grouping             | commit path    | streamed       | difference");
console.log(`one session per clip | ${pct(commit.clip)} | ${pct(streamed.clip)} | ${diff(streamed.clip, commit.clip)} points`);
console.log(`one per speaker      | ${pct(commit.speaker)} | ${pct(streamed.speaker)} | ${diff(streamed.speaker, commit.speaker)} points`);
process.exit(0);
