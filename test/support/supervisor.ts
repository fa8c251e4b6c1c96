import { spawn, type ChildProcess } from "node:child_process";

/** An "stt is up" line of a supervised `stt serve` child: its pid, the services it runs, the port it holds. */
export interface Up {
  services: string[];
  pid: number;
  port?: number;
}

export interface SupervisorProcess {
  proc: ChildProcess;
  /** stdout and stderr so far. */
  output(): string;
  /** The "stt is up" lines of its children so far. */
  ups(): Up[];
}

/**
 * `stt supervise` on `port` with STT_LAYOUT=auto and every service, against the test's
 * own NATS prefix, Postgres schema and data directory, as scripts/start.sh runs it:
 * `command` is the process to run (`bin/stt`, or node with tsx), `env` adds to or
 * overrides the settings here, `detached` starts it in a process group of its own (as
 * a shell starts a job: pgid = its pid).
 */
export function startSupervisor(options: {
  command: [string, ...string[]];
  port: number;
  natsUrl: string;
  prefix: string;
  schema: string;
  dataDir: string;
  adminToken: string;
  env?: Record<string, string>;
  detached?: boolean;
}): SupervisorProcess {
  const [bin, ...args] = options.command;
  const proc = spawn(bin, [...args, "supervise"], {
    env: {
      ...process.env,
      HOST: "127.0.0.1",
      PORT: String(options.port),
      LOG_LEVEL: "info",
      STT_LAYOUT: "auto",
      STT_SERVICES: "all",
      NATS_URL: options.natsUrl,
      NATS_PREFIX: options.prefix,
      DATABASE_SCHEMA: options.schema,
      DATABASE_POOL_MAX: "3",
      DATA_DIR: options.dataDir,
      GATEWAY_ADMIN_TOKEN: options.adminToken,
      POCKETSPHINX_PROCESSES: "1",
      // a free port each: other tests on this machine may hold 9464
      METRICS_PORT: "0",
      ...options.env,
    },
    stdio: ["ignore", "pipe", "pipe"],
    detached: options.detached ?? false,
  });
  let output = "";
  proc.stdout!.on("data", (d) => (output += d));
  proc.stderr!.on("data", (d) => (output += d));
  return {
    proc,
    output: () => output,
    ups: () => [...output.matchAll(/[^\n]*"msg":"stt is up"[^\n]*/g)].map((m) => JSON.parse(m[0]) as Up),
  };
}
