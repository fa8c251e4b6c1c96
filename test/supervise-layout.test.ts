import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { layoutFor } from "../services/stt/layout";
import { serviceDefs } from "../services/stt/services";
import { loadConfig } from "../shared/config";
import { createDb, dropSchema } from "../shared/db/index";
import { connectNats, destroyTopology } from "../shared/nats";
import { wordErrorRate } from "../shared/workers/wer";
import { fixturePath } from "./support/fixtures";
import { waitFor } from "./support/jobs-helpers";
import { freePort } from "./support/ports";
import { gone } from "./support/process-gone";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { issueKeyAt } from "./support/service-process";
import { startSupervisor } from "./support/supervisor";

/**
 * `stt supervise` (what scripts/start.sh runs) with STT_LAYOUT=auto on real processes:
 * on a machine with two cores or more it runs the services as several `stt serve`
 * children (services/stt/layout.ts), all started at once on one fresh NATS prefix and
 * Postgres schema; the edge's port serves /health, /readyz, a segment request and a
 * realtime session whose VAD and engines run in another process; the worker child
 * SIGKILLed is started again while the edge keeps serving; SIGTERM to the supervisor
 * stops every child.
 */

const JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.";
const prefix = `t${randomBytes(5).toString("hex")}`;
const schema = `t_${randomBytes(5).toString("hex")}`;
const dataDir = mkdtempSync(join(tmpdir(), "stt-layout-"));
const adminToken = `admin-${randomBytes(8).toString("hex")}`;
const shutdownMs = 5000;
const natsUrl = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const pids = new Set<number>();
let supervisor: ChildProcess | undefined;

afterAll(async () => {
  if (supervisor && supervisor.exitCode === null && supervisor.signalCode === null) supervisor.kill("SIGKILL");
  // a child left running (a failed test) by its pid
  for (const pid of pids) if (!gone(pid)) process.kill(pid, "SIGKILL");
  const db = createDb({ ...loadConfig(process.env).db, schema });
  await dropSchema(db, schema).catch(() => undefined);
  await db.destroy();
  const nats = await connectNats({ url: natsUrl, prefix, declare: false }).catch(() => undefined);
  if (nats) {
    await destroyTopology(nats).catch(() => undefined);
    await nats.close();
  }
  rmSync(dataDir, { recursive: true, force: true });
});


const status = (url: string) =>
  fetch(url, { headers: { connection: "close" } }).then(
    (r) => r.status,
    () => 0,
  );

const groups = layoutFor(availableParallelism(), "auto", serviceDefs.map((d) => d.name));

describe.skipIf(groups.length < 2)("stt supervise, STT_LAYOUT=auto", () => {
  it("runs one stt serve per group, serves through the edge, restarts a killed worker child alone and stops them all on SIGTERM", async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const started = startSupervisor({
      command: [process.execPath, "--import", "tsx", "services/stt/main.ts"],
      port,
      natsUrl,
      prefix,
      schema,
      dataDir,
      adminToken,
      env: { GATEWAY_SESSION_TOKEN_SECRET: `secret-${randomBytes(8).toString("hex")}`, RT_STREAM_DECODERS_WARM: "2", SHUTDOWN_TIMEOUT_MS: String(shutdownMs), SUPERVISE_INITIAL_DELAY_MS: "100" },
    });
    const { proc, ups, output } = started;
    supervisor = proc;
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
    const fail = (err: unknown) => {
      throw new Error(`${(err as Error).message}\n--- supervisor output:\n${output().slice(-6000)}`);
    };

    // one child per group, started together, each saying what it runs
    await waitFor(async () => ups().length >= groups.length, { timeoutMs: 90_000, what: `${groups.length} "stt is up" lines` }).catch(fail);
    const first = ups();
    for (const up of first) pids.add(up.pid);
    expect(first.map((u) => [...u.services].sort()).sort()).toEqual(groups.map((g) => [...g].sort()).sort());
    expect(new Set(first.map((u) => u.pid)).size).toBe(groups.length);
    expect(first.map((u) => u.pid)).not.toContain(proc.pid);
    const edge = first.filter((u) => u.port !== undefined);
    expect(edge, "exactly one child holds the port").toHaveLength(1);
    expect(edge[0]!.port).toBe(port);
    expect(edge[0]!.services).toContain("http-gateway");

    // the edge answers; ready once the engine in the other process has announced itself
    expect(await status(`${base}/health`)).toBe(200);
    await waitFor(async () => (await status(`${base}/readyz`)) === 200, { timeoutMs: 60_000, what: "/readyz 200" }).catch(fail);

    // a segment request: the edge's router sends the clip to the engine in the worker child
    const key = await issueKeyAt(base, adminToken, "layout");
    const segment = async () => {
      const form = new FormData();
      form.set("file", new Blob([new Uint8Array(readFileSync(fixturePath("jfk.wav")))]), "jfk.wav");
      form.set("response_format", "json");
      const res = await fetch(`${base}/v1/audio/transcriptions`, { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
      return { status: res.status, body: (await res.json()) as { text?: string } };
    };
    const before = await segment();
    expect(before.status, JSON.stringify(before.body)).toBe(200);
    // jfk.wav's words (decoded in two pieces by the child's two engine processes)
    expect(wordErrorRate(JFK_TEXT, before.body.text ?? "").wer).toBeLessThan(0.5);

    // a realtime session: the edge's gateway, the VAD and the engines in the worker child
    const rt = await connectRt(wsUrl(base), { authorization: `Bearer ${key}` });
    await rt.next("session.created");
    await streamPcm(rt, fixture("jfk.wav"), { speed: 4 });
    await streamPcm(rt, silence(1.5), { speed: 4 });
    const completed = await rt.next("conversation.item.input_audio_transcription.completed", 60_000);
    expect(completed.transcript.length).toBeGreaterThan(0);
    rt.sendJson({ type: "session.close" });
    expect((await rt.closed).code).toBe(1000);

    // SIGKILL the child with the engine: it alone is started again, the edge keeps serving
    const worker = first.find((u) => u.services.includes("transcriber"))!;
    expect(worker.port).toBeUndefined();
    process.kill(worker.pid, "SIGKILL");
    const health: number[] = [];
    const restarted = await waitFor(
      async () => {
        health.push(await status(`${base}/health`));
        return ups().find((u) => u.pid !== worker.pid && !first.some((f) => f.pid === u.pid));
      },
      { timeoutMs: 90_000, everyMs: 200, what: "the killed child to be started again" },
    ).catch(fail);
    pids.add(restarted.pid);
    expect(restarted.services).toEqual(worker.services);
    expect(health.every((s) => s === 200), `/health while the worker child restarted: ${health.join(",")}`).toBe(true);
    expect(ups().filter((u) => u.port !== undefined), "the edge was not restarted").toHaveLength(1);
    expect(gone(edge[0]!.pid)).toBe(false);
    expect(output()).toContain('"msg":"supervised process exited: restarting"');
    // the edge is ready again, and the new engine serves: the router leaves the dead one out and finds the new one
    await waitFor(async () => (await status(`${base}/readyz`)) === 200, { timeoutMs: 60_000, what: "/readyz 200 after the restart" }).catch(fail);
    const after = await waitFor(async () => {
      const r = await segment();
      return r.status === 200 ? r : undefined;
    }, { timeoutMs: 60_000, everyMs: 500, what: "a segment request answered by the restarted engine" }).catch(fail);
    expect(wordErrorRate(JFK_TEXT, after.body.text ?? "").wer).toBeLessThan(0.5);

    // SIGTERM to the supervisor stops every child (each bounded by SHUTDOWN_TIMEOUT_MS)
    const live = [edge[0]!.pid, restarted.pid, ...first.filter((u) => u.pid !== worker.pid && u.pid !== edge[0]!.pid).map((u) => u.pid)];
    const stoppedAt = Date.now();
    proc.kill("SIGTERM");
    const code = await exited;
    const tookMs = Date.now() - stoppedAt;
    expect(code, output().slice(-3000)).toBe(0);
    for (const pid of live) expect(gone(pid), `child ${pid} still running`).toBe(true);
    // the bound is the behaviour: SHUTDOWN_TIMEOUT_MS plus a margin for a busy machine
    expect(tookMs).toBeLessThan(shutdownMs + 15_000);
    console.log(`layout ${groups.map((g) => g.length).join("+")} services: supervisor and ${live.length} children stopped ${tookMs} ms after SIGTERM (bound ${shutdownMs} ms each)`);
  });
});
