import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
// s3rver ships CommonJS without types.
// @ts-expect-error no type declarations
import S3rver from "s3rver";

import type { JobView } from "../../schemas/jobs";

/** Helpers shared by the batch-job integration tests (real servers, no mocks). */

export const randomHex = (bytes = 4) => randomBytes(bytes).toString("hex");

export interface LocalS3 {
  endpoint: string;
  bucket: string;
  stop(): Promise<void>;
}

/** A real S3-compatible server (s3rver) on a random port with its own directory. */
export async function startLocalS3(): Promise<LocalS3> {
  const dir = await mkdtemp(join(tmpdir(), "s3rver-"));
  const server = new S3rver({
    port: 0,
    address: "127.0.0.1",
    silent: true,
    directory: dir,
    allowMismatchedSignatures: false,
  });
  const addr = (await server.run()) as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${addr.port}`,
    bucket: `b${randomHex()}`,
    stop: async () => {
      await server.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface LocalHttp {
  url: string;
  server: Server;
  stop(): Promise<void>;
}

/** A real HTTP server on 127.0.0.1 and a random port. */
export async function startHttp(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<LocalHttp> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A local HTTP server answering every request with `bytes` as audio/wav (a job's `audio_url`). */
export function serveAudio(bytes: Uint8Array): Promise<LocalHttp> {
  return startHttp((_req, res) => {
    res.writeHead(200, { "content-type": "audio/wav", "content-length": bytes.length });
    res.end(bytes);
  });
}

export function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

export async function waitFor<T>(
  probe: () => Promise<T | undefined | false>,
  { timeoutMs = 60_000, everyMs = 100, what = "condition" } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** POSTs a job with `key` through the public route; its status and `workflow_id`. */
export async function submitJob(fetchPath: (path: string, init?: RequestInit) => Promise<Response>, key: string, body: unknown): Promise<{ status: number; workflowId: string }> {
  const res = await fetchPath("/v1/audio/transcriptions/jobs", { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, workflowId: ((await res.json()) as { workflow_id: string }).workflow_id };
}

/**
 * Polls a job through the public route until it has ended (`complete` or `errored`) and
 * returns its view; `fetchPath` is the stack's fetch (path, init).
 */
export function waitForJobEnd(
  fetchPath: (path: string, init?: RequestInit) => Promise<Response>,
  key: string,
  workflowId: string,
  { timeoutMs = 60_000, everyMs = 200, what = `job ${workflowId}` } = {},
): Promise<JobView> {
  return waitFor(
    async () => {
      const res = await fetchPath(`/v1/audio/transcriptions/jobs/${workflowId}`, { headers: { authorization: `Bearer ${key}` } });
      const view = (await res.json()) as JobView;
      return view.status === "complete" || view.status === "errored" ? view : undefined;
    },
    { timeoutMs, everyMs, what },
  );
}
