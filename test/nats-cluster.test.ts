import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { artifactKeys, type JobView } from "../schemas/jobs";
import { pcm16MonoFromWav } from "../shared/audio/wav";
import { topology } from "../shared/nats";
import { chunkCount } from "../domain/jobs/slicing";
import { fixturePath } from "./support/fixtures";
import { randomHex, serveAudio, waitFor, type LocalHttp } from "./support/jobs-helpers";
import { connectRt, fixture, silence, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { startOwnService, type OwnService } from "./support/service-process";
import { freePort } from "./support/ports";

/**
 * The cluster profile survives the loss of one node. This test runs its OWN three
 * nats-server processes as a JetStream cluster on loopback (free ports, store
 * directories under a temp dir; the shared server is untouched) and the whole service
 * as a child `stt serve` with all three URLs and NATS_REPLICAS=3. With a batch job
 * (60 s clip, real PocketSphinx) half transcribed and a realtime session streaming
 * speech, it SIGKILLs the node that leads the JOBS stream, then checks that the job
 * completes with every slice and its result, and that the realtime session either
 * goes on transcribing or closes 1013 and a new session transcribes.
 */

const NATS_SERVER = "/usr/sbin/nats-server";
const CLIP = readFileSync(fixturePath("silero_test.wav"));
const SEGMENT_SECONDS = 5;
const CLIP_SAMPLES = pcm16MonoFromWav(CLIP)!.length;
const COMPLETED = "conversation.item.input_audio_transcription.completed";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface ClusterNode {
  name: string;
  port: number;
  monitorPort: number;
  proc: ChildProcess;
  exited: Promise<void>;
}

/** Three nats-server processes with JetStream, routed to each other on loopback. */
async function startCluster(dir: string): Promise<ClusterNode[]> {
  const ports = await Promise.all([0, 1, 2].map(async () => ({ client: await freePort(), route: await freePort(), monitor: await freePort() })));
  const nodes = ports.map(({ client, route, monitor }, i) => {
    const name = `n${i + 1}`;
    const store = join(dir, name);
    mkdirSync(store, { recursive: true });
    const routes = ports.filter((_, j) => j !== i).map((p) => `    nats-route://127.0.0.1:${p.route}`);
    const conf = join(dir, `${name}.conf`);
    writeFileSync(
      conf,
      [
        `server_name: ${name}`,
        `listen: 127.0.0.1:${client}`,
        `http: 127.0.0.1:${monitor}`,
        `jetstream {`,
        `  store_dir: "${store}"`,
        `  max_memory_store: 256MB`,
        `  max_file_store: 2GB`,
        `}`,
        `cluster {`,
        `  name: sttc`,
        `  listen: 127.0.0.1:${route}`,
        `  routes: [`,
        ...routes,
        `  ]`,
        `}`,
        "",
      ].join("\n"),
    );
    const proc = spawn(NATS_SERVER, ["-c", conf], { stdio: "ignore" });
    const exited = new Promise<void>((r) => proc.once("exit", () => r()));
    return { name, port: client, monitorPort: monitor, proc, exited };
  });
  // Ready when every node sees the same elected meta leader.
  await waitFor(
    async () => {
      const leaders = await Promise.all(nodes.map((n) => jsz(n).then((j) => j?.meta_cluster?.leader as string | undefined)));
      return leaders.every((l) => l && l === leaders[0]);
    },
    { timeoutMs: 30_000, everyMs: 200, what: "the JetStream cluster to elect a meta leader" },
  );
  return nodes;
}

async function jsz(node: ClusterNode): Promise<any> {
  return fetch(`http://127.0.0.1:${node.monitorPort}/jsz`, { signal: AbortSignal.timeout(2000) })
    .then((r) => r.json())
    .catch(() => undefined);
}

/** How many of the service's connections (client name "stt:<services>") a node serves. */
async function sttConnections(node: ClusterNode): Promise<number> {
  const connz = await fetch(`http://127.0.0.1:${node.monitorPort}/connz`, { signal: AbortSignal.timeout(2000) })
    .then((r) => r.json() as Promise<{ connections?: { name?: string }[] }>)
    .catch(() => ({ connections: [] as { name?: string }[] }));
  return (connz.connections ?? []).filter((c) => c.name?.startsWith("stt:")).length;
}

async function killNode(node: ClusterNode): Promise<void> {
  if (node.proc.exitCode === null && node.proc.signalCode === null) node.proc.kill("SIGKILL");
  await node.exited;
}

/**
 * Streams speech and pauses into a realtime session until stopped. A session closed
 * 1013 (upstream trouble: the service's documented answer to losing NATS under it) is
 * recorded and replaced by a new one, as a client would reconnect.
 */
function keepTalking(url: string, headers: Record<string, string>) {
  const speech = fixture("jfk.wav");
  const pause = silence(1.5);
  const sessions: RtClient[] = [];
  const closes: { code: number; reason: string; at: number }[] = [];
  const reconnectErrors: string[] = [];
  let stopped = false;
  const done = (async () => {
    while (!stopped) {
      let c: RtClient;
      try {
        c = await connectRt(url, headers);
      } catch (err) {
        // A reconnect refused while the cluster elects new leaders: try again shortly (a
        // client's back-off, not a wait standing for some state).
        reconnectErrors.push(String((err as Error).message));
        await sleep(500);
        continue;
      }
      sessions.push(c);
      let closed = false;
      void c.closed.then((info) => {
        closed = true;
        closes.push({ ...info, at: Date.now() });
      });
      while (!stopped && !closed) {
        // A socket already closing sends nothing (streamPcm returns at once): wait for
        // its close rather than spin, which would starve the event loop.
        if (c.ws.readyState !== c.ws.OPEN) {
          await Promise.race([c.closed, sleep(1000)]);
          continue;
        }
        await streamPcm(c, speech, { speed: 1, chunkBytes: 3200 });
        await streamPcm(c, pause, { speed: 1, chunkBytes: 3200 });
      }
      if (closed) await sleep(500); // a client backs off before reconnecting
      else {
        // the graceful close: the open utterance is committed and every committed item gets
        // its result before the close (docs/realtime.md), rather than a sleep for it
        c.sendJson({ type: "session.close" });
        await c.closed;
      }
    }
  })();
  return {
    sessions,
    closes,
    reconnectErrors,
    /** Every transcript received, with the session it came on and when its speech started. */
    completed: () =>
      sessions.flatMap((s, i) =>
        s.events
          .filter((e) => e.type === COMPLETED)
          .map((e) => ({
            session: i,
            at: e.__t as number,
            spokenAt: (s.events.find((x) => x.type === "input_audio_buffer.speech_started" && x.item_id === e.item_id)?.__t as number | undefined) ?? Infinity,
            transcript: String(e.transcript ?? ""),
          })),
      ),
    stop: async () => {
      stopped = true;
      await done;
    },
  };
}

describe("three-node NATS cluster, one node killed", () => {
  let dir: string;
  let nodes: ClusterNode[] = [];
  let own: OwnService;
  let baseUrl: string;
  let audio: LocalHttp;
  let key: string;
  let admin: NatsConnection;
  let jsm: JetStreamManager;
  const prefix = `t${randomHex(5)}`;
  const top = topology(prefix);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "stt-natscluster-"));
    nodes = await startCluster(dir);
    const urls = nodes.map((n) => `nats://127.0.0.1:${n.port}`).join(",");
    admin = await connect({ servers: urls.split(","), name: "cluster-test", maxReconnectAttempts: -1, reconnectTimeWait: 250 });
    jsm = await jetstreamManager(admin);
    audio = await serveAudio(CLIP);
    own = await startOwnService(
      {
        NATS_URL: urls,
        NATS_REPLICAS: "3",
        RT_STREAM_DECODERS_WARM: "1",
        LOG_LEVEL: process.env.DEBUG_CLUSTER ? "debug" : "info",
      },
      { owner: "nats-cluster", prefix, timeoutMs: 120_000, onOutput: (chunk) => process.env.DEBUG_CLUSTER && appendFileSync(process.env.DEBUG_CLUSTER, chunk) },
    );
    ({ baseUrl, key } = own);
    expect(key).toMatch(/^sk-/);
  }, 240_000);

  afterAll(async () => {
    await own?.stop();
    await admin?.close().catch(() => undefined);
    for (const n of nodes) await killNode(n);
    await audio?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  const auth = () => ({ authorization: `Bearer ${key}` });
  const poll = async (id: string) => {
    const res = await fetch(`${baseUrl}/v1/audio/transcriptions/jobs/${id}`, { headers: auth(), signal: AbortSignal.timeout(10_000) }).catch(() => undefined);
    return res?.status === 200 ? ((await res.json()) as JobView) : undefined;
  };

  it("streams and buckets have three replicas, a job completes whole and realtime carries on through a node's SIGKILL", { timeout: 300_000 }, async () => {
    // The cluster profile: every stream and every bucket the service opened has 3 replicas.
    for (const spec of Object.values(top.streams)) {
      const info = await jsm.streams.info(spec.name);
      expect(info.config.num_replicas, spec.name).toBe(3);
      expect(info.cluster?.replicas?.length, spec.name).toBe(2);
    }
    for (const bucket of ["workers", "leases"] as const) {
      const info = await jsm.streams.info(`KV_${top.buckets[bucket].name}`);
      expect(info.config.num_replicas, bucket).toBe(3);
    }

    const talk = keepTalking(wsUrl(baseUrl), auth());
    try {
      // A transcript before the fault: the realtime plane works on the cluster.
      await waitFor(async () => talk.completed().length > 0, { timeoutMs: 40_000, everyMs: 200, what: "a realtime transcript before the fault" });

      const requestId = `cluster-${randomHex()}`;
      const submitted = await fetch(`${baseUrl}/v1/audio/transcriptions/jobs`, {
        method: "POST",
        headers: { ...auth(), "content-type": "application/json" },
        body: JSON.stringify({ audio_url: `${audio.url}/clip.wav`, request_id: requestId, segment_seconds: SEGMENT_SECONDS, concurrency: 2, language: "en" }),
      });
      expect(submitted.status).toBe(202);
      const job = (await submitted.json()) as { workflow_id: string };
      const chunks = chunkCount(CLIP_SAMPLES, 16000, SEGMENT_SECONDS);
      expect(chunks).toBeGreaterThanOrEqual(10);
      const submittedAt = Date.now();

      // Mid-job: some slices transcribed, most not.
      const midway = await waitFor(
        async () => {
          const v = await poll(job.workflow_id);
          const done = v?.steps.filter((s) => s.name.startsWith("transcribe_chunk_") && s.status === "complete").length ?? 0;
          return done >= 2 ? v : undefined;
        },
        { timeoutMs: 120_000, everyMs: 100, what: "the job to be half way" },
      );
      const doneBefore = midway.steps.filter((s) => s.name.startsWith("transcribe_chunk_") && s.status === "complete").length;
      expect(doneBefore).toBeLessThan(chunks);

      // The victim: the JOBS stream's leader. Note its other roles.
      const jobsInfo = await jsm.streams.info(top.streams.jobs.name);
      const victimName = jobsInfo.cluster!.leader!;
      const victim = nodes.find((n) => n.name === victimName)!;
      const roles = {
        jobsLeader: true,
        metaLeader: (await jsz(victim))?.meta_cluster?.leader === victimName,
        rtAudioLeader: (await jsm.streams.info(top.streams.rtAudio.name)).cluster?.leader === victimName,
        rtEventsLeader: (await jsm.streams.info(top.streams.rtEvents.name)).cluster?.leader === victimName,
        serviceConnections: await sttConnections(victim),
      };
      const transcriptsBefore = talk.completed().length;
      await killNode(victim);
      const killedAt = Date.now();
      if (process.env.DEBUG_CLUSTER) console.log(`killed ${victimName} at ${new Date(killedAt).toISOString()} ${JSON.stringify(roles)}`);
      const survivors = nodes.filter((n) => n !== victim);

      // The job completes, whole.
      const view = await waitFor(
        async () => {
          const v = await poll(job.workflow_id);
          return v && (v.status === "complete" || v.status === "errored") ? v : undefined;
        },
        { timeoutMs: 120_000, everyMs: 250, what: `job ${job.workflow_id} to end after the kill` },
      ).catch(async (err) => {
        // Where it stuck: the job's steps and every JOBS durable's state.
        const v = await poll(job.workflow_id);
        const durables: string[] = [];
        for await (const c of jsm.consumers.list(top.streams.jobs.name)) {
          durables.push(`${c.name}: pending ${c.num_pending}, unacked ${c.num_ack_pending}, waiting pulls ${c.num_waiting}, leader ${c.cluster?.leader}`);
        }
        throw new Error(`${(err as Error).message}; steps ${v?.steps.map((st) => `${st.name}:${st.status}`).join(" ")}; ${durables.join("; ")}`);
      });
      const jobDoneAt = Date.now();
      expect(view.status, JSON.stringify(view.error)).toBe("complete");
      const chunkSteps = view.steps.filter((s) => s.name.startsWith("transcribe_chunk_"));
      expect(chunkSteps.map((s) => s.name).sort()).toEqual(Array.from({ length: chunks }, (_, i) => `transcribe_chunk_${i}`).sort());
      expect(chunkSteps.every((s) => s.status === "complete")).toBe(true);
      const result = view.output!.result;
      expect(result.metadata.chunk_count).toBe(chunks);
      expect(result.summary.total_duration).toBeCloseTo(CLIP_SAMPLES / 16000, 0);
      expect(result.segments.length).toBeGreaterThan(chunks / 2);
      expect(result.text.split(/\s+/).length).toBeGreaterThan(50);
      // Every slice's checkpoint and the result are in the object store.
      const owner = { workflowId: job.workflow_id, requestId };
      const objects = join(own.dataDir, "objects");
      for (let i = 0; i < chunks; i++) expect(existsSync(join(objects, artifactKeys.chunk(owner, i))), `chunk_${i}.json`).toBe(true);
      expect(JSON.parse(readFileSync(join(objects, artifactKeys.result(owner)), "utf8")).text).toBe(result.text);

      // Realtime: either the session carried on (speech begun after the kill transcribed
      // on the first session) or it closed 1013 and a reconnect transcribes.
      await waitFor(async () => talk.completed().some((c) => c.spokenAt > killedAt), { timeoutMs: 120_000, everyMs: 200, what: "a realtime transcript of speech begun after the kill" });
      const firstClose = talk.closes[0];
      if (firstClose) {
        // Closed (at once, or after carrying on a while): only ever 1013, and a session
        // opened after the close transcribes.
        await waitFor(async () => talk.completed().some((c) => c.session > 0 && c.spokenAt > firstClose.at), {
          timeoutMs: 120_000,
          everyMs: 200,
          what: "a transcript on a session reconnected after the 1013",
        });
        for (const close of talk.closes) expect(close.code, close.reason).toBe(1013);
      } else {
        expect(talk.completed().some((c) => c.session === 0 && c.spokenAt > killedAt)).toBe(true);
      }
      const after = talk.completed().filter((c) => c.spokenAt > killedAt);
      expect(after.some((c) => /[a-z]{3}/i.test(c.transcript))).toBe(true);
      // The largest pause between transcripts around the kill.
      const times = talk.completed().map((c) => c.at).sort((a, b) => a - b);
      const gapAcrossKill = Math.max(...times.slice(1).map((t, i) => (t > killedAt && times[i]! < killedAt + 60_000 ? t - times[i]! : 0)));

      // The survivors still have a quorum: the JOBS stream has a new leader among them.
      const jobsAfter = await jsm.streams.info(top.streams.jobs.name);
      expect(survivors.map((n) => n.name)).toContain(jobsAfter.cluster?.leader);

      console.log(
        `nats cluster: killed ${victimName} ${JSON.stringify(roles)} with ${doneBefore}/${chunks} slices done ` +
          `${killedAt - submittedAt} ms after submission; job complete ${jobDoneAt - killedAt} ms after the kill ` +
          `(${jobDoneAt - submittedAt} ms in all); realtime: ${firstClose ? `closed ${firstClose.code} ${firstClose.reason} ${firstClose.at - killedAt} ms after the kill, ` : "session continued, "}` +
          `first transcript after the kill at +${Math.min(...talk.completed().filter((c) => c.at > killedAt).map((c) => c.at)) - killedAt} ms, ` +
          `of speech begun after it at +${Math.min(...after.map((c) => c.at)) - killedAt} ms, longest gap between transcripts ${gapAcrossKill} ms ` +
          `(${transcriptsBefore} before, ${after.length} after); reconnect refusals ${talk.reconnectErrors.length}`,
      );
      if (process.env.DEBUG_CLUSTER) {
        for (const [i, c] of talk.sessions.entries()) {
          const ev = c.events.map((e) => `${e.__t - killedAt}:${String(e.type).replace("conversation.item.", "").replace("input_audio_buffer.", "")}`);
          if (ev.length > 2) console.log(`session ${i}: ${ev.join(" ")}`);
        }
        console.log(`killed at ${new Date(killedAt).toISOString()}; steps: ${view.steps.map((s) => `${s.name}:${s.attempt}:${s.started_at?.slice(14, 23)}-${s.ended_at?.slice(14, 23)}`).join(" ")}`);
      }
    } finally {
      await talk.stop();
    }
  });
});
