import { createConnection, createServer, type Server, type Socket } from "node:net";
import { chromium, type Browser } from "playwright-core";

/**
 * Debian's Chromium, headless, with a fake microphone that loops `micWav` (a 16-bit WAV)
 * and grants it without asking: how the browser tests (the demo and playground pages)
 * stream real speech through a page's getUserMedia.
 */
export function launchWithFakeMic(micWav: string): Promise<Browser> {
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--autoplay-policy=no-user-gesture-required",
      "--use-fake-ui-for-media-stream",
      "--use-fake-device-for-media-stream",
      `--use-file-for-fake-audio-capture=${micWav}`,
    ],
  });
}

/** A TCP proxy to the gateway whose connections can be cut (no close frame: the server sees 1006). */
export async function cuttableProxy(port: number): Promise<{ port: number; cut(): void; server: Server }> {
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = createConnection({ host: "127.0.0.1", port });
    open.add(client);
    open.add(upstream);
    client.pipe(upstream).pipe(client);
    const drop = () => (client.destroy(), upstream.destroy(), open.delete(client), open.delete(upstream));
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { port: (server.address() as { port: number }).port, server, cut: () => open.forEach((s) => s.destroy()) };
}

