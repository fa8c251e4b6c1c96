import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../shared/config";
import { plans } from "../shared/plans";
import { startStack, type Stack } from "./support/stack";

/** Plans from PLANS_FILE and per-key limit overrides, enforced on the real stack. */
const dir = mkdtempSync(join(tmpdir(), "stt-plans-"));
const plansFile = join(dir, "plans.json");
writeFileSync(plansFile, JSON.stringify({ plans: { team: { ...plans.pro, maxRequestsPerMinute: 3 } } }));

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ PLANS_FILE: plansFile });
});
afterAll(async () => {
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const admin = () => ({ authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" });
const tokenRequest = (key: string) => stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: { authorization: `Bearer ${key}` } });
async function freshMinute() {
  const second = new Date().getUTCSeconds();
  if (second > 45) await new Promise((r) => setTimeout(r, (61 - second) * 1000));
}

describe("plans and per-key limits", () => {
  it("a PLANS_FILE plan is listed, issuable and enforced", async () => {
    const listed = (await (await stack.fetch("/v1/external-transcription/plans", { headers: admin() })).json()) as any;
    expect(listed.data.map((p: any) => p.plan)).toEqual(["free", "pro", "team"]);
    expect(listed.data.find((p: any) => p.plan === "team").limits.maxRequestsPerMinute).toBe(3);
    await freshMinute();
    const { key } = await stack.issueKey("team", "t1");
    for (let i = 0; i < 3; i++) expect((await tokenRequest(key)).status).toBe(200);
    const refused = await tokenRequest(key);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("x-ratelimit-limit-requests")).toBe("3");
  });

  it("a key's own overrides are shown in its record and enforced", async () => {
    await freshMinute();
    const res = await stack.fetch("/v1/external-transcription/keys", { method: "POST", headers: admin(), body: JSON.stringify({ owner_id: "o2", plan: "free", limits: { maxRequestsPerMinute: 2 } }) });
    expect(res.status).toBe(201);
    const issued = ((await res.json()) as any).data;
    expect(issued.limitOverrides).toEqual({ maxRequestsPerMinute: 2 });
    expect(issued.limits).toMatchObject({ ...plans.free, maxRequestsPerMinute: 2 });
    const read = ((await (await stack.fetch(`/v1/external-transcription/keys/${issued.id}`, { headers: admin() })).json()) as any).data;
    expect(read.limitOverrides).toEqual({ maxRequestsPerMinute: 2 });
    expect(read.limits.maxRequestsPerMinute).toBe(2);
    expect((await tokenRequest(issued.key)).status).toBe(200);
    expect((await tokenRequest(issued.key)).status).toBe(200);
    expect((await tokenRequest(issued.key)).status).toBe(429);

    // raised above the plan: pro's 120 per minute does not hold this key back
    const big = ((await (await stack.fetch("/v1/external-transcription/keys", { method: "POST", headers: admin(), body: JSON.stringify({ plan: "pro", limits: { maxRequestsPerMinute: 5000 } }) })).json()) as any).data;
    expect(big.limits.maxRequestsPerMinute).toBe(5000);
    const statuses: number[] = [];
    for (let i = 0; i < 130; i += 5) statuses.push(...(await Promise.all(Array.from({ length: 5 }, () => tokenRequest(big.key).then((r) => r.status)))));
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  });

  it("refuses overrides that are not limits, and unknown plans", async () => {
    for (const limits of [{ maxRequestsPerMinute: -1 }, { maxRequestsPerMinute: 1.5 }, { notALimit: 1 }, "x"]) {
      const res = await stack.fetch("/v1/external-transcription/keys", { method: "POST", headers: admin(), body: JSON.stringify({ plan: "free", limits }) });
      expect(res.status, JSON.stringify(limits)).toBe(400);
    }
    const res = await stack.fetch("/v1/external-transcription/keys", { method: "POST", headers: admin(), body: JSON.stringify({ plan: "gold" }) });
    expect(((await res.json()) as any).error.code).toBe("invalid_plan");
  });

  it("a bad PLANS_FILE stops the process at start with the problem named", () => {
    const bad = join(dir, "bad.json");
    writeFileSync(bad, JSON.stringify({ plans: { team: { maxRequestsPerMinute: 3 } } }));
    expect(() => loadConfig({ PLANS_FILE: bad })).toThrow(ConfigError);
    expect(() => loadConfig({ PLANS_FILE: bad })).toThrow(/PLANS_FILE .*team\.maxConcurrentConnections/);
    expect(() => loadConfig({ PLANS_FILE: join(dir, "missing.json") })).toThrow(/PLANS_FILE/);
  });
});
