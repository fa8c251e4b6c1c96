import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, open, readdir, readFile, rename, rm, stat, unlink, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import { randomBytes } from "node:crypto";
import { pipeline } from "node:stream/promises";
import type { ObjectStore } from "./types";
import { assertValidKey, assertValidPrefix } from "./keys";

/**
 * Filesystem object store, the embedded default. Keys map to paths under `root`;
 * writes go to a temp file in the same directory and are renamed into place, so a
 * reader (or a resume after a crash) never sees a partial object.
 */
export async function createFsObjectStore(root: string): Promise<ObjectStore> {
  const base = resolve(root);
  await mkdir(base, { recursive: true });
  const pathOf = (key: string) => {
    assertValidKey(key);
    return join(base, ...key.split("/"));
  };
  const tempOf = (path: string) => `${path}.${randomBytes(6).toString("hex")}.tmp`;
  const missing = (err: unknown) => (err as NodeJS.ErrnoException)?.code === "ENOENT";

  const listAll = async (dir: string): Promise<string[]> => {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (err) {
      if (missing(err)) return [];
      throw err;
    }
    const out: string[] = [];
    for (const e of entries) {
      const full = join(dir, e.name);
      if (e.isDirectory()) out.push(...(await listAll(full)));
      else if (!e.name.endsWith(".tmp")) out.push(relative(base, full).split(sep).join("/"));
    }
    return out;
  };

  const store: ObjectStore = {
    backend: "fs",
    async put(key, body) {
      const path = pathOf(key);
      await mkdir(dirname(path), { recursive: true });
      const tmp = tempOf(path);
      await writeFile(tmp, body);
      await rename(tmp, path);
    },
    async putFile(key, source) {
      const path = pathOf(key);
      await mkdir(dirname(path), { recursive: true });
      const tmp = tempOf(path);
      await pipeline(createReadStream(source), createWriteStream(tmp));
      await rename(tmp, path);
    },
    async get(key) {
      try {
        return await readFile(pathOf(key));
      } catch (err) {
        if (missing(err)) return undefined;
        throw err;
      }
    },
    async getRange(key, start, end) {
      let handle;
      try {
        handle = await open(pathOf(key), "r");
      } catch (err) {
        if (missing(err)) return undefined;
        throw err;
      }
      try {
        const length = Math.max(0, end - start);
        const buf = Buffer.alloc(length);
        const { bytesRead } = await handle.read(buf, 0, length, start);
        return buf.subarray(0, bytesRead);
      } finally {
        await handle.close();
      }
    },
    async head(key) {
      try {
        const s = await stat(pathOf(key));
        return { size: s.size };
      } catch (err) {
        if (missing(err)) return undefined;
        throw err;
      }
    },
    async list(prefix) {
      assertValidPrefix(prefix);
      // Walk only the deepest directory the prefix names, then filter.
      const dirPart = prefix.includes("/") ? prefix.slice(0, prefix.lastIndexOf("/")) : "";
      const keys = await listAll(dirPart ? join(base, ...dirPart.split("/")) : base);
      return keys.filter((k) => k.startsWith(prefix)).sort();
    },
    async delete(key) {
      await unlink(pathOf(key)).catch((err) => {
        if (!missing(err)) throw err;
      });
    },
    async deletePrefix(prefix) {
      assertValidPrefix(prefix);
      if (prefix === "") {
        await rm(base, { recursive: true, force: true });
        await mkdir(base, { recursive: true });
        return;
      }
      if (prefix.endsWith("/")) {
        await rm(join(base, ...prefix.slice(0, -1).split("/")), { recursive: true, force: true });
        return;
      }
      for (const key of await store.list(prefix)) await store.delete(key);
    },
    async close() {},
  };
  return store;
}
