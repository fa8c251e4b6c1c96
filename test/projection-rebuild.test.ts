import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitForProjection } from "../shared/projection";
import { remainingAudioSeconds } from "../domain/usage/queries";
import { startStack, type Stack } from "./support/stack";

const run = promisify(execFile);
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

async function snapshot() {
  const keys = await stack.db.selectFrom("api_keys").selectAll().orderBy("id").execute();
  const usage = await stack.db.selectFrom("usage_windows").select(["key_id", "owner_id", "window_start", "audio_seconds", "requests"]).orderBy("key_id").orderBy("window_start").execute();
  return { keys, usage };
}

/** Waits until the projection's stored offset reaches the end of its stream. */
async function settle(name: string) {
  const projection = stack.runtime.ctx.projections.find((p) => p.name === name)!;
  const head = (await stack.nats.jsm.streams.info(projection.stream)).state.last_seq;
  expect(await waitForProjection(stack.db, name, head, 10_000)).toBe(true);
}

describe("projections", () => {
  it("`stt rebuild all` drops the read models and rebuilds rows equal to the live ones", async () => {
    const issued: Array<{ key: string; id: string }> = [];
    for (let i = 0; i < 5; i++) issued.push(await stack.issueKey(i % 2 ? "pro" : "free", `owner-${i % 3}`, { label: `k${i}` }));
    for (const k of issued.slice(0, 2)) {
      await stack.fetch(`/v1/external-transcription/keys/${k.id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.adminToken}` } });
    }
    const now = new Date();
    for (const [i, k] of issued.entries()) {
      await stack.runtime.ctx.usage.record({ keyId: k.id, ownerId: `owner-${i % 3}`, plane: "segment", audioSeconds: 1.5 * (i + 1), requests: 1, subjectId: `req-${i}`, at: now });
      await stack.runtime.ctx.usage.record({ keyId: k.id, ownerId: `owner-${i % 3}`, plane: "batch", audioSeconds: 10, requests: 1, subjectId: `job-${i}`, at: now });
    }
    // a retried usage append with the same id counts once
    await stack.runtime.ctx.usage.record({ keyId: issued[4]!.id, ownerId: "owner-1", plane: "batch", audioSeconds: 10, requests: 1, subjectId: "job-4", at: now });
    await settle("api_keys");
    await settle("usage_windows");
    const live = await snapshot();
    expect(live.keys).toHaveLength(5);
    expect(live.keys.filter((k) => k.revoked_at !== null)).toHaveLength(2);
    expect(live.usage).toHaveLength(5);
    const fifth = live.usage.find((u) => u.key_id === issued[4]!.id)!;
    expect(fifth.audio_seconds).toBeCloseTo(7.5 + 10);
    expect(Number(fifth.requests)).toBe(2);
    expect(await remainingAudioSeconds(stack.db, { keyId: issued[4]!.id, limits: { maxAudioSecondsPerWindow: 3600 } as never }, now, stack.config.usage.windowSeconds)).toBe(3600 - 18);

    // wreck the read models, then rebuild them with the CLI in a separate process
    await stack.db.deleteFrom("api_keys").execute();
    await stack.db.updateTable("usage_windows").set({ audio_seconds: 0 }).execute();
    const env = { ...process.env, NATS_URL: stack.config.nats.url, DATABASE_URL: stack.config.db.url, NATS_PREFIX: stack.config.nats.prefix, DATABASE_SCHEMA: stack.config.db.schema, LOG_LEVEL: "info" };
    const { stderr } = await run("bin/stt", ["rebuild", "all"], { env, timeout: 60_000 });
    expect(stderr).toContain('"projection":"api_keys"');
    expect(stderr).toContain('"projection":"usage_windows"');
    const rebuilt = await snapshot();
    expect(rebuilt).toEqual(live);

    // replaying again is a no-op
    await run("bin/stt", ["rebuild", "api_keys"], { env, timeout: 60_000 });
    expect(await snapshot()).toEqual(live);
  });

  it("rejects an unknown projection name", async () => {
    const env = { ...process.env, NATS_URL: stack.config.nats.url, DATABASE_URL: stack.config.db.url, NATS_PREFIX: stack.config.nats.prefix, DATABASE_SCHEMA: stack.config.db.schema };
    await expect(run("bin/stt", ["rebuild", "nope"], { env })).rejects.toMatchObject({ code: 2 });
  });
});
