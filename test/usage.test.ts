import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixturePath } from "./support/fixtures";
import { waitFor } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";

/** GET /v1/usage agrees with the usage projection; the operator's per-owner view too. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

describe("usage", () => {
  it("shows a key its plan, window, audio and requests, as the read model has them", async () => {
    const second = new Date().getUTCSeconds();
    if (second > 45) await new Promise((r) => setTimeout(r, (61 - second) * 1000));
    const { key, id } = await stack.issueKey("free", "usage-owner");
    const auth = { authorization: `Bearer ${key}` };
    const fresh = (await (await stack.fetch("/v1/usage", { headers: auth })).json()) as any;
    expect(fresh).toMatchObject({ object: "usage", key_id: id, owner_id: "usage-owner", plan: "free", audio_seconds: { used: 0, remaining: 3600, limit: 3600 }, requests: { window: 0, current_minute: 0, per_minute_limit: 12 } });
    expect(new Date(fresh.window.end).getTime() - new Date(fresh.window.start).getTime()).toBe(fresh.window.seconds * 1000);

    const form = new FormData();
    form.set("file", new Blob([readFileSync(fixturePath("jfk.wav"))], { type: "audio/wav" }), "jfk.wav");
    expect((await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: auth, body: form })).status).toBe(200);
    expect((await stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: auth })).status).toBe(200);

    const row = await waitFor(() => stack.db.selectFrom("usage_windows").selectAll().where("key_id", "=", id).executeTakeFirst(), { what: "the usage row" });
    const view = (await (await stack.fetch("/v1/usage", { headers: auth })).json()) as any;
    expect(view.audio_seconds.used).toBeCloseTo(Number(row.audio_seconds), 3);
    expect(view.audio_seconds.used).toBeGreaterThan(10); // jfk.wav is 11 s
    expect(view.audio_seconds.remaining).toBeCloseTo(3600 - Number(row.audio_seconds), 3);
    expect(view.requests.window).toBe(Number(row.requests));
    expect(view.requests.current_minute).toBe(2); // segment + session token; the polls of /v1/usage are not counted

    const owner = (await (await stack.fetch("/v1/external-transcription/usage?owner_id=usage-owner", { headers: { authorization: `Bearer ${stack.adminToken}` } })).json()) as any;
    expect(owner.ok).toBe(true);
    expect(owner.data.keys).toEqual([{ key_id: id, plan: "free", audio_seconds: view.audio_seconds.used, requests: view.requests.window, audio_limit: 3600 }]);
    expect(owner.data.audio_seconds).toBe(view.audio_seconds.used);
  });

  it("needs a key, and the operator view an admin token and an owner", async () => {
    expect((await stack.fetch("/v1/usage")).status).toBe(401);
    expect((await stack.fetch("/v1/external-transcription/usage?owner_id=x")).status).toBe(401);
    const noOwner = await stack.fetch("/v1/external-transcription/usage", { headers: { authorization: `Bearer ${stack.adminToken}` } });
    expect(noOwner.status).toBe(400);
    expect(((await noOwner.json()) as any).ok).toBe(false);
  });
});
