import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { redactUrl, safeDownload, safeRequest, type SafeFetchOptions } from "../shared/net/safe-fetch";
import { readBody, startHttp, waitFor, type LocalHttp } from "./support/jobs-helpers";

// A real HTTP server on 127.0.0.1 plays every remote: audio host, slow host, redirector.
let server: LocalHttp;
let dir: string;
/** When the server saw a /drip or /silent connection close. */
const dripClosed: number[] = [];
const payload = Buffer.alloc(200_000, 3);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "safe-fetch-"));
  server = await startHttp(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    switch (url.pathname) {
      case "/audio.wav":
        res.writeHead(200, { "content-type": "audio/wav", "content-length": payload.length });
        res.end(payload);
        return;
      case "/chunked":
        res.writeHead(200, { "content-type": "audio/wav" });
        for (let i = 0; i < 10; i++) res.write(payload.subarray(0, 50_000));
        res.end();
        return;
      case "/slow":
        res.writeHead(200, { "content-type": "audio/wav" });
        res.write("x");
        setTimeout(() => res.end("y"), 5_000).unref();
        return;
      case "/redirect":
        res.writeHead(302, { location: url.searchParams.get("to") ?? "/audio.wav" });
        res.end();
        return;
      case "/loop":
        res.writeHead(302, { location: "/loop" });
        res.end();
        return;
      case "/echo": {
        const body = await readBody(req);
        res.writeHead(201, { "content-type": "text/plain" });
        res.end(`${req.method} ${req.headers["x-test"]} ${body.toString()}`);
        return;
      }
      case "/drip": {
        // 1 byte a second, forever; tells the test when the client hangs up.
        res.writeHead(200, { "content-type": "audio/wav" });
        const timer = setInterval(() => res.write("x"), 1000);
        res.write("x");
        res.on("close", () => (clearInterval(timer), dripClosed.push(Date.now())));
        return;
      }
      case "/silent":
        // accepts the request and never answers
        res.on("close", () => dripClosed.push(Date.now()));
        return;
      case "/steady": {
        // 2,000 bytes every 100 ms for 1.5 s: slow but steady
        res.writeHead(200, { "content-type": "audio/wav" });
        let sent = 0;
        const timer = setInterval(() => {
          res.write(payload.subarray(0, 2000));
          if (++sent === 15) (clearInterval(timer), res.end());
        }, 100);
        res.on("close", () => clearInterval(timer));
        return;
      }
      case "/boom":
        res.writeHead(503);
        res.end();
        return;
      default:
        res.writeHead(404);
        res.end("nope");
    }
  });
});

afterAll(async () => {
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

const opts = (o: Partial<SafeFetchOptions> = {}): SafeFetchOptions => ({ allowPrivate: true, timeoutMs: 2_000, maxBytes: 1_000_000, ...o });
let n = 0;
const dest = () => join(dir, `f${n++}`);

describe("safeDownload", () => {
  it("streams a body to disk", async () => {
    const path = dest();
    const res = await safeDownload(`${server.url}/audio.wav`, path, opts());
    expect(res.status).toBe(200);
    expect(res.bytes).toBe(payload.length);
    expect(res.headers["content-type"]).toBe("audio/wav");
    expect((await readFile(path)).equals(payload)).toBe(true);
  });

  it("refuses loopback without the opt-in, by name, literal and encoded forms", async () => {
    const port = new URL(server.url).port;
    for (const url of [
      `${server.url}/audio.wav`,
      `http://localhost:${port}/audio.wav`,
      `http://[::ffff:127.0.0.1]:${port}/audio.wav`,
      `http://2130706433:${port}/audio.wav`,
      `http://0x7f.1:${port}/audio.wav`,
      `http://[::1]:${port}/audio.wav`,
    ]) {
      await expect(safeDownload(url, dest(), opts({ allowPrivate: false })), url).rejects.toMatchObject({ code: "url_not_allowed", retryable: false });
    }
  });

  it("refuses metadata and link-local targets even with the opt-in, also behind a redirect", async () => {
    await expect(safeDownload("http://169.254.169.254/latest/meta-data/", dest(), opts())).rejects.toMatchObject({ code: "url_not_allowed" });
    await expect(safeDownload("http://[fe80::1]/x", dest(), opts())).rejects.toMatchObject({ code: "url_not_allowed" });
    const to = encodeURIComponent("http://169.254.169.254/latest/meta-data/");
    await expect(safeDownload(`${server.url}/redirect?to=${to}`, dest(), opts())).rejects.toMatchObject({ code: "url_not_allowed" });
    await expect(safeDownload("http://0.0.0.0:1/x", dest(), opts())).rejects.toMatchObject({ code: "url_not_allowed" });
  });

  it("follows allowed redirects and stops redirect loops", async () => {
    const res = await safeDownload(`${server.url}/redirect`, dest(), opts());
    expect(res.bytes).toBe(payload.length);
    expect(res.url).toBe(`${server.url}/audio.wav`);
    await expect(safeDownload(`${server.url}/loop`, dest(), opts())).rejects.toMatchObject({
      code: "too_many_redirects",
      message: `more than 5 redirects (the last from ${server.url}/loop to ${server.url}/loop)`,
    });
  });

  it("maps 404, 5xx, unreachable hosts and bad schemes to clear codes", async () => {
    await expect(safeDownload(`${server.url}/missing.wav`, dest(), opts())).rejects.toMatchObject({ code: "audio_not_found", retryable: false });
    await expect(safeDownload(`${server.url}/boom`, dest(), opts())).rejects.toMatchObject({ code: "fetch_http_error", retryable: true });
    await expect(safeDownload("http://127.0.0.1:1/x", dest(), opts())).rejects.toMatchObject({ code: "fetch_failed", retryable: true });
    await expect(safeDownload("ftp://example.com/x", dest(), opts())).rejects.toMatchObject({ code: "invalid_url" });
    await expect(safeDownload("http://no-such-host.invalid/x", dest(), opts())).rejects.toMatchObject({ code: "fetch_failed" });
  });

  it("enforces the byte limit (declared and streamed) and removes the partial file", async () => {
    const p1 = dest();
    await expect(safeDownload(`${server.url}/audio.wav`, p1, opts({ maxBytes: 1000 }))).rejects.toMatchObject({ code: "audio_too_large" });
    const p2 = dest();
    await expect(safeDownload(`${server.url}/chunked`, p2, opts({ maxBytes: 120_000 }))).rejects.toMatchObject({ code: "audio_too_large" });
    await expect(stat(p2)).rejects.toThrow();
  });

  it("enforces the time limit on a slow body", async () => {
    const started = Date.now();
    await expect(safeDownload(`${server.url}/slow`, dest(), opts({ timeoutMs: 300 }))).rejects.toMatchObject({ code: "fetch_timeout", retryable: true });
    expect(Date.now() - started).toBeLessThan(3_000);
  });
});

describe("safeDownload: minimum transfer rate", () => {
  const slowOpts = opts({ timeoutMs: 60_000, minBytesPerSecond: 500, minRateWindowMs: 1000 });

  it("aborts a body dripping below the rate with fetch_too_slow (permanent), closing the connection", async () => {
    const closedBefore = dripClosed.length;
    const path = dest();
    const err = await safeDownload(`${server.url}/drip?token=secret`, path, slowOpts).catch((e) => e);
    expect(err).toMatchObject({ code: "fetch_too_slow", retryable: false });
    expect(err.message).toContain(`${server.url}/drip`);
    expect(err.message).not.toContain("secret");
    expect(err.message).toMatch(/least accepted is 500 bytes\/s/);
    await expect(stat(path)).rejects.toThrow();
    // the origin sees the connection closed (not held to the 60 s deadline)
    await waitFor(async () => dripClosed.length > closedBefore, { timeoutMs: 30_000, what: "the drip connection to close" });
  });

  it("counts the wait for headers: a server that never answers is too slow too", async () => {
    const closedBefore = dripClosed.length;
    await expect(safeDownload(`${server.url}/silent`, dest(), slowOpts)).rejects.toMatchObject({ code: "fetch_too_slow" });
    await waitFor(async () => dripClosed.length > closedBefore, { timeoutMs: 30_000, what: "the silent connection to close" });
  });

  it("keeps a download that is slow but above the rate, over several windows", async () => {
    const res = await safeDownload(`${server.url}/steady`, dest(), opts({ timeoutMs: 60_000, minBytesPerSecond: 1000, minRateWindowMs: 400 }));
    expect(res.bytes).toBe(30_000);
  });
});

describe("safeDownload: errors name the failing hop", () => {
  it("an unreachable redirect target is named, with the URL that redirected to it", async () => {
    const to = encodeURIComponent("http://127.0.0.1:1/gone.wav?sig=abc");
    const err = await safeDownload(`${server.url}/redirect?to=${to}`, dest(), opts()).catch((e) => e);
    expect(err).toMatchObject({ code: "fetch_failed" });
    expect(err.message).toContain("could not reach http://127.0.0.1:1/gone.wav");
    expect(err.message).toContain(`(redirected from ${server.url}/redirect)`);
    expect(err.message).not.toContain("sig=abc");
  });

  it("a redirect to a missing file names the missing file", async () => {
    const err = await safeDownload(`${server.url}/redirect?to=/nothing-here.wav`, dest(), opts()).catch((e) => e);
    expect(err).toMatchObject({ code: "audio_not_found" });
    expect(err.message).toMatch(new RegExp(`^${server.url}/nothing-here.wav \\(redirected from ${server.url}/redirect\\) answered 404$`));
  });
});

describe("safeRequest", () => {
  it("posts a body with headers and returns the answer", async () => {
    const res = await safeRequest(`${server.url}/echo`, opts({ method: "POST", body: "hello", headers: { "x-test": "t1" } }));
    expect(res.status).toBe(201);
    expect(res.body.toString()).toBe("POST t1 hello");
  });
});

describe("redactUrl", () => {
  it("drops credentials, query and fragment", () => {
    expect(redactUrl("https://user:pw@host.example/a/b.wav?X-Amz-Signature=abc#f")).toBe("https://host.example/a/b.wav");
  });
});
