import { validationError } from "../errors";

const keyPattern = /^[A-Za-z0-9._:=-]+(\/[A-Za-z0-9._:=-]+)*$/;

/**
 * Rejects keys that could escape the store's root or mean different things to the two
 * backends: empty segments, `.`/`..`, absolute paths, characters outside a safe set.
 */
export function assertValidKey(key: string): void {
  if (key.length === 0 || key.length > 900 || !keyPattern.test(key) || key.split("/").some((s) => s === "." || s === "..")) {
    throw validationError("invalid_object_key", `invalid object key: ${JSON.stringify(key.slice(0, 80))}`);
  }
}

export function assertValidPrefix(prefix: string): void {
  if (prefix === "") return;
  assertValidKey(prefix.endsWith("/") ? prefix.slice(0, -1) : prefix);
}

