/**
 * Partials from an engine that decodes whole clips (docs/realtime.md, "Partials from
 * engines that decode whole clips"), measured against the streaming targets: first
 * delta ≤ 1 s after the first word ends, final ≤ 300 ms after the VAD stops.
 *
 *   nice -n 19 npx tsx bench/partials.ts [--rounds 5] [--delay 100]
 *
 * A separate `stt serve` whose only engine is a real local OpenAI-compatible server that
 * hears perfectly (test/support/timed-reference.ts: each clip answered with the words of
 * jfk.wav's force-aligned transcript that end inside it) after a fixed `--delay` ms,
 * with RT_UPSTREAM_PARTIALS=true. One session per round, one after another, each
 * streaming jfk.wav in 20 ms frames at real time (each frame sent when its last sample
 * has been spoken), then 2 s of silence. Per round: the first delta's arrival after the
 * end of "And" (0.63 s into the clip), each item's `completed` after its
 * `speech_stopped`, whether the deltas add up to each `completed` and the finals to the
 * reference, and the upstream requests.
 */
import { connectRt, silence, wsUrl } from "../test/support/realtime-support";
import { concatPcm } from "../test/support/fixtures";
import { itemsOf, jfkTimedReference, speak } from "../test/support/timed-reference";
import { startProviderServer } from "../test/support/workers-provider-server";
import { BenchDeployment } from "./support/deployment";
import { pct, stopServer } from "./support/server";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const rounds = Number(args.get("rounds") ?? 5);
const delayMs = Number(args.get("delay") ?? 100);
const T = "conversation.item.input_audio_transcription";

const reference = jfkTimedReference();
const provider = await startProviderServer("timed-reference");
provider.behaviour.delayMs = delayMs;
provider.behaviour.timedWords = (clip) => reference.hear(clip);
const deployment = new BenchDeployment();
const { proc, baseUrl } = await deployment.serve({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, RT_UPSTREAM_PARTIALS: "true", RT_STREAM_DECODERS: "4" });
try {
  const key = await deployment.issueKey(baseUrl, "bench-partials");
  const firsts: number[] = [];
  const finals: number[] = [];
  let exact = 0;
  let added = 0;
  let items = 0;
  for (let r = 0; r < rounds; r++) {
    const c = await connectRt(wsUrl(baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    const before = provider.requests.length;
    const t0 = await speak(c, concatPcm(reference.pcm, silence(2)));
    const done: string[] = [];
    while (done.join(" ").split(" ").length < reference.words.length) done.push((await c.next(`${T}.completed`, 15_000)).transcript);
    const got = itemsOf(c);
    const first = got[0]?.deltas[0];
    if (first) firsts.push(first.__t - (t0 + reference.words[0]!.end * 1000));
    for (const i of got) finals.push(i.completed.__t - i.stopped.__t);
    if (got.map((i) => i.completed.transcript).join(" ") === reference.transcript) exact++;
    added += got.filter((i) => i.deltas.map((d) => d.delta).join("") === i.completed.transcript).length;
    items += got.length;
    console.log(`round ${r + 1}: first delta ${first ? firsts.at(-1) : "—"} ms after "And" ended; finals ${got.map((i) => i.completed.__t - i.stopped.__t).join(", ")} ms after speech_stopped; ${provider.requests.length - before} upstream requests for ${got.length} items`);
    c.ws.close();
    await c.closed;
  }
  const ms = (xs: number[]) => `p50 ${Math.round(pct(xs, 50))} / p90 ${Math.round(pct(xs, 90))} / max ${Math.round(Math.max(...xs))} ms`;
  console.log(`decode delay ${delayMs} ms, ${rounds} rounds of jfk.wav at real time`);
  console.log(`first delta after the first word ends: ${ms(firsts)} (target ≤ 1000: ${firsts.filter((x) => x <= 1000).length}/${firsts.length})`);
  console.log(`final after speech_stopped: ${ms(finals)} (target ≤ 300: ${finals.filter((x) => x <= 300).length}/${finals.length})`);
  console.log(`final text equal to the reference: ${exact}/${rounds} rounds; deltas adding up to completed: ${added}/${items} items; upstream in flight at most ${provider.maxInFlight}`);
} finally {
  await stopServer(proc);
  await deployment.destroy();
  await provider.close();
}
process.exit(0);
