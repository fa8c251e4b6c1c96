import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { AppError } from "../errors";
import type { ObjectStore } from "./types";
import { assertValidKey, assertValidPrefix } from "./keys";

export interface S3StoreOptions {
  endpoint?: string;
  region: string;
  bucket: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  forcePathStyle: boolean;
  /** Create the bucket when it does not exist (embedded/test setups). Default true. */
  createBucket?: boolean;
}

/**
 * S3 object store through @aws-sdk/client-s3. Checksums are only computed when an
 * operation requires them: recent SDKs otherwise send CRC32 trailers that many
 * S3-compatible servers (MinIO versions, s3rver, Ceph) reject.
 */
export async function createS3ObjectStore(options: S3StoreOptions): Promise<ObjectStore> {
  const client = new S3Client({
    region: options.region,
    endpoint: options.endpoint,
    forcePathStyle: options.forcePathStyle,
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
    ...(options.accessKeyId && options.secretAccessKey
      ? { credentials: { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey } }
      : {}),
  });
  const Bucket = options.bucket;
  const unavailable = (op: string, err: unknown) =>
    new AppError("unavailable", "object_store_unavailable", `object store ${op} failed`, { cause: err });
  const isMissing = (err: unknown) => {
    const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
    return e?.name === "NoSuchKey" || e?.name === "NotFound" || e?.$metadata?.httpStatusCode === 404;
  };
  const read = async (key: string, range?: string): Promise<Buffer | undefined> => {
    assertValidKey(key);
    try {
      const res = await client.send(new GetObjectCommand({ Bucket, Key: key, Range: range }));
      if (!res.Body) return Buffer.alloc(0);
      return Buffer.from(await res.Body.transformToByteArray());
    } catch (err) {
      if (isMissing(err)) return undefined;
      // An empty object asked for a range answers 416; it has no bytes in any range.
      if ((err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode === 416) return Buffer.alloc(0);
      throw unavailable("get", err);
    }
  };
  const listKeys = async (prefix: string): Promise<string[]> => {
    assertValidPrefix(prefix);
    const keys: string[] = [];
    let token: string | undefined;
    try {
      do {
        const res = await client.send(new ListObjectsV2Command({ Bucket, Prefix: prefix, ContinuationToken: token }));
        for (const o of res.Contents ?? []) if (o.Key) keys.push(o.Key);
        token = res.IsTruncated ? res.NextContinuationToken : undefined;
      } while (token);
    } catch (err) {
      throw unavailable("list", err);
    }
    return keys.sort();
  };

  if (options.createBucket !== false) {
    try {
      await client.send(new HeadBucketCommand({ Bucket }));
    } catch (err) {
      if (!isMissing(err)) throw unavailable("head bucket", err);
      await client.send(new CreateBucketCommand({ Bucket })).catch((e) => {
        const name = (e as { name?: string })?.name;
        if (name !== "BucketAlreadyOwnedByYou" && name !== "BucketAlreadyExists") throw unavailable("create bucket", e);
      });
    }
  }

  return {
    backend: "s3",
    async put(key, body, opts) {
      assertValidKey(key);
      try {
        await client.send(new PutObjectCommand({ Bucket, Key: key, Body: body, ContentType: opts?.contentType }));
      } catch (err) {
        throw unavailable("put", err);
      }
    },
    async putFile(key, path, opts) {
      assertValidKey(key);
      const { size } = await stat(path);
      try {
        await client.send(
          new PutObjectCommand({ Bucket, Key: key, Body: createReadStream(path), ContentLength: size, ContentType: opts?.contentType }),
        );
      } catch (err) {
        throw unavailable("put", err);
      }
    },
    get: (key) => read(key),
    getRange: (key, start, end) => (end <= start ? Promise.resolve(Buffer.alloc(0)) : read(key, `bytes=${start}-${end - 1}`)),
    async head(key) {
      assertValidKey(key);
      try {
        const res = await client.send(new HeadObjectCommand({ Bucket, Key: key }));
        return { size: res.ContentLength ?? 0 };
      } catch (err) {
        if (isMissing(err)) return undefined;
        throw unavailable("head", err);
      }
    },
    list: listKeys,
    async delete(key) {
      assertValidKey(key);
      try {
        await client.send(new DeleteObjectCommand({ Bucket, Key: key }));
      } catch (err) {
        if (!isMissing(err)) throw unavailable("delete", err);
      }
    },
    async deletePrefix(prefix) {
      const keys = await listKeys(prefix);
      for (let i = 0; i < keys.length; i += 1000) {
        const batch = keys.slice(i, i + 1000);
        try {
          await client.send(new DeleteObjectsCommand({ Bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } }));
        } catch {
          // DeleteObjects needs Content-MD5 on some servers; fall back to one by one.
          for (const Key of batch) await client.send(new DeleteObjectCommand({ Bucket, Key })).catch(() => undefined);
        }
      }
    },
    async close() {
      client.destroy();
    },
  };
}
