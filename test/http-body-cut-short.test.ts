import uWS, { type us_listen_socket } from "@trufflesuite/uws-js-unofficial";
import { createConnection } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BODY_STALL_MS, bridgeToFetch } from "../services/realtime-gateway/http-bridge";
import { startStack, type Stack } from "./support/stack";

/**
 * A request body shorter than its Content-Length, on the one port (uWS → the bridge →
 * hono): a client that stops sending but still reads gets 408 in the route's envelope
 * and the connection closed; a client that half-closes cannot be answered (uWS 20.30
 * closes the connection on FIN), but the route waiting for the body is told at once
 * instead of waiting forever.
 */
let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack();
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
});

interface RawReply {
  text: string;
  /** When the server closed the connection, after the request was written. */
  closedAfterMs: number;
  error?: string;
}

/** Writes `head` + `body` on a plain TCP socket, optionally half-closes, and collects what comes back until the server closes. */
function rawRequest(port: number, head: string, body: string, options: { halfClose: boolean }): Promise<RawReply> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: "127.0.0.1" });
    let text = "";
    let error: string | undefined;
    let t0 = Date.now();
    socket.on("data", (d) => (text += d.toString("utf8")));
    socket.on("error", (e) => (error = e.message));
    socket.on("close", () => resolve({ text, closedAfterMs: Date.now() - t0, error }));
    socket.write(head + body, () => {
      t0 = Date.now();
      if (options.halfClose) socket.end();
    });
    setTimeout(() => socket.destroy(), 60_000).unref();
  });
}

const post = (path: string, declared: number, headers: Record<string, string>) =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("")}\r\n`;

const parse = (reply: RawReply) => {
  const [head = "", body = ""] = reply.text.split("\r\n\r\n");
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), head, body: body ? JSON.parse(body) : null };
};

describe("a body shorter than its Content-Length", () => {
  it("a client that stops sending gets 408 request_timeout in the OpenAI envelope, then the connection closes", { timeout: 60_000 }, async () => {
    const body = '{"audio_url":"https://example.com/a.wav"';
    const [jobs, admin] = await Promise.all([
      rawRequest(stack.port, post("/v1/audio/transcriptions/jobs", body.length + 100, { authorization: `Bearer ${key}` }), body, { halfClose: false }),
      // the admin routes answer in their own envelope
      rawRequest(stack.port, post("/v1/external-transcription/keys", 500, { authorization: `Bearer ${stack.adminToken}` }), '{"plan":"free"', { halfClose: false }),
    ]);
    const r = parse(jobs);
    expect(r.status, jobs.text).toBe(408);
    expect(r.body).toEqual({
      error: {
        type: "invalid_request_error",
        code: "request_timeout",
        param: null,
        message: expect.stringContaining(`${body.length} of the ${body.length + 100} bytes its Content-Length declares arrived`),
      },
    });
    expect(r.head.toLowerCase()).toContain("connection: close");
    // answered after the stall bound, and before uWS's own silent close (8-12 s) would have come
    expect(jobs.closedAfterMs).toBeGreaterThanOrEqual(BODY_STALL_MS - 100);
    const a = parse(admin);
    expect(a.status, admin.text).toBe(408);
    expect(a.body).toEqual({ ok: false, error: { code: "request_timeout", retryable: false, message: expect.stringContaining("14 of the 500 bytes") } });
  });

  it("a complete body is unaffected by the stall watch: sent slowly in pieces, each gap under the bound", { timeout: 60_000 }, async () => {
    const body = JSON.stringify({ plan: "free", owner_id: "slow-writer" });
    const reply = await new Promise<string>((resolve) => {
      const socket = createConnection({ port: stack.port, host: "127.0.0.1" });
      let text = "";
      socket.on("data", (d) => {
        text += d.toString("utf8");
        if (text.includes("\r\n\r\n") && text.endsWith("}")) (socket.destroy(), resolve(text));
      });
      socket.write(post("/v1/external-transcription/keys", body.length, { authorization: `Bearer ${stack.adminToken}` }));
      const third = Math.floor(body.length / 3);
      // gaps that add up to more than the bound, none of them over half of it
      setTimeout(() => socket.write(body.slice(0, third)), BODY_STALL_MS * 0.4);
      setTimeout(() => socket.write(body.slice(third, 2 * third)), BODY_STALL_MS * 0.8);
      setTimeout(() => socket.write(body.slice(2 * third)), BODY_STALL_MS * 1.2);
    });
    expect(parse({ text: reply, closedAfterMs: 0 }).status, reply).toBe(201);
  });

  it("a client that half-closes mid-body: uWS closes on FIN (no answer can be written), and the route reading the body is told at once", { timeout: 60_000 }, async () => {
    // a bridge of its own on a real uWS listener, with a route that records how its read ended
    const outcomes: { ms: number; error?: { code?: string; status?: number; message: string } }[] = [];
    const app = uWS.App();
    app.any("/*", (res, req) =>
      bridgeToFetch(
        async (request) => {
          const t0 = Date.now();
          try {
            await request.arrayBuffer();
            outcomes.push({ ms: Date.now() - t0 });
          } catch (err) {
            const e = err as { code?: string; status?: number; message: string };
            outcomes.push({ ms: Date.now() - t0, error: { code: e.code, status: e.status, message: e.message } });
          }
          return new Response("{}", { status: 200 });
        },
        res,
        req,
      ),
    );
    const listen = await new Promise<us_listen_socket>((resolve, reject) => app.listen("127.0.0.1", 0, (s) => (s ? resolve(s) : reject(new Error("no listen")))));
    try {
      const port = uWS.us_socket_local_port(listen);
      const reply = await rawRequest(port, post("/v1/audio/transcriptions/jobs", 200, {}), '{"audio_url":', { halfClose: true });
      expect(reply.text).toBe(""); // uWS 20.30: "HTTP does not support half-closed sockets"
      expect(reply.closedAfterMs).toBeLessThan(BODY_STALL_MS);
      const deadline = Date.now() + 10_000;
      while (outcomes.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(outcomes).toEqual([
        { ms: expect.any(Number), error: { code: "invalid_request", status: 400, message: expect.stringContaining("the connection closed before the request body was complete: 13 of the 200 bytes") } },
      ]);
      expect(outcomes[0]!.ms).toBeLessThan(BODY_STALL_MS);
    } finally {
      uWS.us_listen_socket_close(listen);
    }
  });
});
