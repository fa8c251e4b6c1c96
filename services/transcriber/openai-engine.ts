import { modelsUrl, transcribeWithOpenAI, type OpenAIEndpoint } from "../../shared/workers/openai-client";
import type { TranscriptionEngine } from "../../shared/workers/types";

/**
 * An OpenAI-compatible server run as a worker: the worker service announces it and
 * the router posts to it like any other worker. Warm means its last readiness probe
 * (GET …/v1/models, every `probeMs`) answered 2xx; a server still loading its model
 * (503) is announced cold at once, one that does not answer (down, or this process too
 * busy to read the answer in time) after three probes in a row, and the router does not
 * post to it.
 */
export interface OpenAIEngineOptions extends OpenAIEndpoint {
  models?: string[];
  /** ISO-639-1 codes it serves (default any). */
  languages?: string[];
  realTimeFactor?: number;
  concurrency?: number;
  probeMs?: number;
  /** How long one probe waits for its answer (default 2000 ms). */
  probeTimeoutMs?: number;
}

const PROBE_MISSES = 3;

export async function createOpenAIEngine(options: OpenAIEngineOptions): Promise<TranscriptionEngine> {
  let warm = false;
  // A probe that got no answer in time counts only when PROBE_MISSES in a row did: one
  // late answer on a busy process must not turn the worker cold (the router then refuses
  // realtime upgrades and closes every open session 1013). An answer that is not 2xx
  // (a server loading its model) turns it cold at once.
  let misses = 0;
  const probe = async () => {
    try {
      const res = await fetch(modelsUrl(options.url), {
        headers: options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {},
        signal: AbortSignal.timeout(options.probeTimeoutMs ?? 2000),
      });
      await res.body?.cancel();
      warm = res.ok;
      misses = 0;
    } catch {
      if (++misses >= PROBE_MISSES) warm = false;
    }
  };
  await probe();
  const timer = setInterval(() => void probe(), options.probeMs ?? 2000);
  timer.unref();
  return {
    kind: "openai",
    formatsText: true,
    models: options.models ?? (options.model ? [options.model] : ["stt-1"]),
    languages: options.languages ?? ["*"],
    realTimeFactor: options.realTimeFactor ?? 0.1,
    concurrency: options.concurrency ?? 8,
    warm: () => warm,
    transcribe: (request) => transcribeWithOpenAI(options, request),
    async close() {
      clearInterval(timer);
    },
  };
}
