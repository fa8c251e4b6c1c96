/**
 * Object storage for job artifacts (decoded audio, chunk checkpoints, results).
 * Two real backends sit behind this one interface: the filesystem (the embedded
 * default) and any S3-compatible service.
 *
 * Guarantees both backends give: a `put` is all-or-nothing (readers never see a
 * half-written object: fs writes a temp file and renames it, S3 PUT is atomic), so a
 * stored checkpoint is either complete or absent. Missing objects read as `undefined`
 * rather than throwing, because "not there yet" is the normal resume check.
 */
export interface ObjectStore {
  readonly backend: "fs" | "s3";
  put(key: string, body: Uint8Array | string, options?: PutOptions): Promise<void>;
  /** Streams a local file into the store without loading it into memory. */
  putFile(key: string, path: string, options?: PutOptions): Promise<void>;
  /** The whole object, or undefined when absent. */
  get(key: string): Promise<Buffer | undefined>;
  /** Bytes [start, end) of the object, or undefined when absent. */
  getRange(key: string, start: number, end: number): Promise<Buffer | undefined>;
  /** Size in bytes, or undefined when absent. */
  head(key: string): Promise<{ size: number } | undefined>;
  /** Keys under a prefix, sorted. */
  list(prefix: string): Promise<string[]>;
  delete(key: string): Promise<void>;
  /** Deletes every key under a prefix (test cleanup, retention). */
  deletePrefix(prefix: string): Promise<void>;
  close(): Promise<void>;
}

interface PutOptions {
  contentType?: string;
}
