import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { partitionOf } from "../services/realtime-gateway/session";
import { ASSIGNMENT_KEY, type AssignmentTable } from "../services/vad/partition-assignment";
import { startStack, type Stack } from "./support/stack";
import { connectRt, fixture, silence, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";

/**
 * VAD replicas share RT_AUDIO's partitions through the lease table in KV. The stack's
 * own VAD starts alone with all four partitions; a second VAD process joins and takes
 * half (the first stops, then releases them); the second is then killed with SIGKILL
 * and the first takes its partitions back once their leases expire. A session whose
 * partition moves both ways keeps its settings (restored from KV by the new owner) and
 * keeps getting speech events and transcripts; a diarizing session keeps its speakers.
 */
const TTL_MS = 1500;
const PARTITIONS = 4;
let stack: Stack;
let replica: ServiceProcess | undefined;

beforeAll(async () => {
  stack = await startStack({ RT_VAD_LEASE_TTL_MS: String(TTL_MS), RT_VAD_PARTITIONS: String(PARTITIONS) });
});
afterAll(async () => {
  await replica?.kill();
  await stack?.stop();
});

/** Live owners from the shared table: member → partitions. */
async function owners(): Promise<Record<string, number[]>> {
  const entry = await (await stack.nats.kv("leases")).get(ASSIGNMENT_KEY);
  const table = (entry?.operation === "PUT" ? entry.json() : { members: {}, owners: {} }) as AssignmentTable;
  const out: Record<string, number[]> = {};
  for (const [p, o] of Object.entries(table.owners)) {
    if (o.exp > Date.now()) (out[o.member] ??= []).push(Number(p));
  }
  for (const ps of Object.values(out)) ps.sort((a, b) => a - b);
  return out;
}

async function waitFor<T>(what: string, probe: () => Promise<T | null>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== null) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(await owners())}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Streams speech, then waits for every utterance it produced to be committed and transcribed. */
async function speakAndCollect(c: RtClient, pcm: Int16Array) {
  const from = c.events.length;
  await streamPcm(c, pcm, { speed: Infinity });
  await streamPcm(c, silence(1.2), { speed: Infinity }); // lets the VAD close the last utterance
  const deadline = Date.now() + 120_000; // a cap: a loaded machine is slow, not wrong
  for (;;) {
    const events = c.events.slice(from);
    const committed = events.filter((e) => e.type === "input_audio_buffer.committed");
    const done = events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
    if (committed.length > 0 && done.length >= committed.length && committed.at(-1).reason === "vad") return { committed, done };
    if (Date.now() > deadline) throw new Error(`no transcripts: ${JSON.stringify(events.map((e) => e.type))}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("VAD replicas share the partitions (leases in KV)", () => {
  it("splits partitions when a replica joins, takes them back when it is killed; sessions keep settings and transcripts", async () => {
    const alone = await owners();
    expect(Object.values(alone)).toEqual([[0, 1, 2, 3]]);
    const [first] = Object.keys(alone);

    // a session on a partition that will move (the first replica keeps the lowest ones
    // when its member id sorts first, else the highest): open sessions until one is on each half
    const { key } = await stack.issueKey("pro");
    const auth = { authorization: `Bearer ${key}` };
    const sessions: { c: RtClient; id: string; partition: number }[] = [];
    while (new Set(sessions.map((s) => s.partition >= 2)).size < 2 && sessions.length < 10) {
      const c = await connectRt(wsUrl(stack.baseUrl), auth);
      const created = await c.next("session.created");
      sessions.push({ c, id: created.session_id, partition: partitionOf(created.session_id, PARTITIONS) });
    }
    for (const { c } of sessions) {
      // a setting the new owner must restore: utterances cut at 1 s
      c.sendJson({ type: "session.update", session: { turn_detection: { max_utterance_ms: 1000 } } });
      await c.next("session.updated");
      await streamPcm(c, silence(0.3), { speed: Infinity });
    }
    // the first replica has saved every session's settings (the 1 s cut) in KV, where a new owner restores them from
    const kv = await stack.nats.kv("leases");
    await waitFor(
      "every session's settings in KV",
      async () => {
        for (const { id } of sessions) {
          const entry = await kv.get(`vad.session.${id}`); // services/vad/vad-consumer.ts settingsKey
          if (entry?.operation !== "PUT" || entry.json<any>().turn_detection?.max_utterance_ms !== 1000) return null;
        }
        return true;
      },
      60_000,
    );

    replica = await startServiceProcess(stack, "vad", { RT_VAD_LEASE_TTL_MS: String(TTL_MS), RT_VAD_PARTITIONS: String(PARTITIONS) });
    const split = await waitFor(
      "an even split",
      async () => {
        const o = await owners();
        return Object.keys(o).length === 2 && Object.values(o).every((ps) => ps.length === 2) ? o : null;
      },
      60_000,
    );
    const second = Object.keys(split).find((m) => m !== first)!;
    const moved = sessions.find((s) => split[second].includes(s.partition));
    const stayed = sessions.find((s) => split[first].includes(s.partition));
    expect(moved && stayed).toBeTruthy();

    const speech = fixture("jfk.wav").subarray(0, 16000 * 4);
    for (const s of [moved!, stayed!]) {
      const { committed, done } = await speakAndCollect(s.c, speech);
      // the 1 s cut survived the move: the settings came from KV, not the defaults (20 s)
      expect(committed.some((e) => e.reason === "max_length")).toBe(true);
      for (const e of committed) expect(e.audio_end_ms - e.audio_start_ms).toBeLessThanOrEqual(1000 + 50);
      expect(done.map((e) => e.transcript).join(" ").trim().length).toBeGreaterThan(0);
    }

    // a diarizing session on a partition of the second replica: two people before it dies
    let talker: { c: RtClient; id: string; partition: number } | undefined;
    for (let tries = 0; !talker && tries < 20; tries++) {
      const c = await connectRt(wsUrl(stack.baseUrl), auth);
      const created = await c.next("session.created");
      const partition = partitionOf(created.session_id, PARTITIONS);
      if (split[second].includes(partition)) talker = { c, id: created.session_id, partition };
      else c.ws.close(1000);
    }
    talker!.c.sendJson({ type: "session.update", session: { input_audio_transcription: { diarize: true } } });
    await talker!.c.next("session.updated");
    const [a, b] = [fixture("silero_test.wav").subarray(0, 16000 * 6), fixture("jfk.wav").subarray(0, 16000 * 5)];
    const labels = (done: any[]) => done.map((e) => e.speaker as string);
    const [first_a, first_b] = [labels((await speakAndCollect(talker!.c, a)).done), labels((await speakAndCollect(talker!.c, b)).done)];
    const [labelA, labelB] = [first_a.at(-1)!, first_b.at(-1)!];
    expect(labelA).not.toBe(labelB);

    // the second replica dies without any cleanup; speech sent meanwhile waits in the stream
    const killedAt = Date.now();
    await replica.kill();
    const after = speakAndCollect(moved!.c, speech);
    const back = await waitFor("the first replica to own every partition", async () => {
      const o = await owners();
      return o[first]?.length === PARTITIONS ? Date.now() - killedAt : null;
    }, 60_000);
    // taken back because the dead replica's leases expired (TTL_MS after its last renewal),
    // not by some slower path; 10 TTLs is a margin that holds with both cores busy
    expect(back).toBeLessThan(10 * TTL_MS);
    const { committed, done } = await after;
    expect(committed.some((e) => e.reason === "max_length")).toBe(true);
    expect(done.length).toBeGreaterThanOrEqual(committed.length);
    // the first replica took the diarizing session with its speakers (kept in KV): the
    // second person is still who they were, not the first label of a fresh session
    const again = labels((await speakAndCollect(talker!.c, b)).done);
    expect(again.at(-1), JSON.stringify({ first_a, first_b, again })).toBe(labelB);
    talker!.c.sendJson({ type: "session.close" });
    await talker!.c.closed;

    // over the whole session: item ids never repeat, and each committed item has one transcript
    const all = moved!.c.events;
    const ids = all.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    expect(new Set(ids).size).toBe(ids.length);
    const completed = all.filter((e) => e.type === "conversation.item.input_audio_transcription.completed").map((e) => e.item_id);
    expect([...completed].sort()).toEqual([...ids].sort());

    for (const { c } of sessions) {
      c.sendJson({ type: "session.close" });
      expect((await c.closed).code).toBe(1000);
    }
  });
});
