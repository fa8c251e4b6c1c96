/**
 * Word error rate of the realtime plane's finals, streamed against the commit path, on
 * the same labelled clips (issue 10: "within 2 points"). Each clip is one session on a
 * real stack: its audio paced at BENCH_SPEED × real time in 20 ms frames, then 1.5 s of
 * silence and session.close; the session's `completed` transcripts, in order, are its
 * hypothesis. One stack streams (the default), one has RT_STREAM_DECODERS=0 (every
 * utterance goes commit → transcribe). Run: npx tsx bench/realtime-wer.ts
 */
import { connectRt, silence, streamPcm, wsUrl } from "../test/support/realtime-support";
import { startStack } from "../test/support/stack";
import { wordErrorRate } from "../shared/workers/wer";
import { labelledClips } from "./support/clips";

const speed = Number(process.env.BENCH_SPEED ?? 2);
const clips = await labelledClips();

async function run(mode: "streamed" | "commit path") {
  const stack = await startStack({ RT_STREAM_DECODERS: mode === "streamed" ? "4" : "0", RT_STREAM_DECODERS_WARM: mode === "streamed" ? "4" : "0", LOG_LEVEL: "error" });
  try {
    const { key } = await stack.issueKey("pro", "wer");
    let errors = 0;
    let words = 0;
    let streamedItems = 0;
    for (const c of clips) {
      const rt = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
      const created = await rt.next("session.created");
      if ((created.input_audio_transcription?.streaming ?? false) !== (mode === "streamed")) throw new Error(`${mode}: session.created says streaming=${created.input_audio_transcription?.streaming}`);
      await streamPcm(rt, c.pcm, { speed, chunkBytes: 640 });
      await streamPcm(rt, silence(1.5), { speed, chunkBytes: 640 });
      rt.sendJson({ type: "session.close" });
      await rt.closed;
      const finals = rt.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
      streamedItems += rt.events.filter((e) => e.type === "conversation.item.input_audio_transcription.interim" || e.type === "conversation.item.input_audio_transcription.delta").length > 0 && mode === "streamed" ? finals.length : 0;
      const w = wordErrorRate(c.ref, finals.map((e) => e.transcript).join(" "));
      errors += w.errors;
      words += w.referenceWords;
      console.log(`  ${mode} ${c.name}: ${finals.length} items, WER ${(100 * w.wer).toFixed(1)}%`);
    }
    return { wer: errors / words, errors, words, items: streamedItems };
  } finally {
    await stack.stop();
  }
}

const commit = await run("commit path");
const streamed = await run("streamed");
console.log(`commit path: WER ${(100 * commit.wer).toFixed(1)}% (${commit.errors}/${commit.words})`);
console.log(`streamed:    WER ${(100 * streamed.wer).toFixed(1)}% (${streamed.errors}/${streamed.words})`);
console.log(`difference:  ${(100 * (streamed.wer - commit.wer)).toFixed(1)} points`);
process.exit(0);
