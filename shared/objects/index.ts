import type { Config } from "../config";
import { createFsObjectStore } from "./fs-store";
import { createS3ObjectStore } from "./s3-store";
import type { ObjectStore } from "./types";

export type { ObjectStore } from "./types";

/** Reads and parses a JSON object; undefined when absent. */
export async function getJson<T = unknown>(store: ObjectStore, key: string): Promise<T | undefined> {
  const body = await store.get(key);
  return body === undefined ? undefined : (JSON.parse(body.toString("utf8")) as T);
}

export function putJson(store: ObjectStore, key: string, value: unknown): Promise<void> {
  return store.put(key, JSON.stringify(value), { contentType: "application/json" });
}

/** Builds the configured backend. */
export async function createObjectStore(config: Config["objects"]): Promise<ObjectStore> {
  if (config.backend === "s3") return createS3ObjectStore(config.s3);
  return createFsObjectStore(config.dir);
}

export { createFsObjectStore } from "./fs-store";
export { createS3ObjectStore } from "./s3-store";
