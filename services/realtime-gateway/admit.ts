import { randomBytes, randomUUID } from "node:crypto";
import { SUPPORTED_SAMPLE_RATES } from "../../schemas/realtime";
import { bearerCredential, CLIENT_SECRET_PREFIX, redeemSessionToken, refuseKeysInUrl, SESSION_TOKEN_PREFIX, type Principal } from "../../domain/keys/auth";
import { verifyClientSecret } from "../../domain/keys/client-secret";
import { parseWebSocketProtocols } from "../../domain/keys/upgrade-credentials";
import type { TranscriptionSessionPreset } from "../../schemas/client-secrets";
import type { KeyCache } from "../../domain/keys/key-cache";
import type { KeyStore } from "../../domain/keys/store";
import type { AudioBudget } from "../../domain/usage/budget";
import type { UsageStore } from "../../domain/usage/store";
import type { Limits } from "../../schemas/plans";
import type { Config } from "../../shared/config";
import type { Db } from "../../shared/db/index";
import { AppError, unauthorized, validationError } from "../../shared/errors";
import type { Nats } from "../../shared/nats";
import type { Logger } from "../../shared/logger";
import { consumeRate } from "../../shared/rate-limit";
import type { RefusalReason } from "../../domain/sessions/admission";
import type { Headroom } from "./headroom";
import type { WorkerRouter } from "../../shared/workers/types";
import type { GatewayFlag } from "./gateway-flag";
import type { Leases } from "./leases";
import { spendTokensInLeases } from "./spent-tokens";
import { keytermValues } from "../../schemas/keyterms";

/**
 * The upgrade decision (spec 3.3, 5.3, 7.2, 8): gateway switch, authentication, upstream
 * breaker, headroom (a saturated rt-transcriber, a busy gateway or VAD, a burst of admissions: headroom.ts), handshake rate and concurrent-connection quota, audio parameters. Returns
 * what the session needs, or throws the AppError the refusal is written from. The
 * concurrency lease is taken last, so nothing else can fail after it (except an abort,
 * which the caller turns into a release).
 */
export interface UpgradeRequest {
  /** The Authorization header ("" when absent). */
  authorization: string;
  /**
   * The raw Sec-WebSocket-Protocol header ("" when absent): a browser's credential comes
   * as its `openai-insecure-api-key.<key>` entry (domain/keys/upgrade-credentials.ts).
   * Answer the upgrade with protocolToAnswer(protocols), never with this value.
   */
  protocols: string;
  /** Raw query string (after `?`). */
  query: string;
  /** The client's address: failed authentication is throttled per address. */
  source: string;
}

export interface Admission {
  sessionId: string;
  requestId: string;
  principal: Principal;
  limits: Limits;
  sampleRate: number;
  channels: number;
  /** `multichannel=true`: each channel has its own VAD and items (session-channels.ts); else the channels are mixed down. */
  multichannel: boolean;
  remainingAudioSeconds: number;
  /** The key's live window budget, drawn as audio arrives (domain/usage/budget.ts). */
  budget: AudioBudget;
  language: string | null;
  prompt: string | null;
  /** `?keyterms=` on the native door's upgrade (schemas/keyterms.ts); absent: none. */
  keyterms?: string[];
  /**
   * The session configuration of the `ek_` client secret the connection authenticated
   * with (GA-shaped, validated), for the OpenAI-compatible door to apply as the session's
   * initial configuration. Absent for other credentials. The native door ignores it: its
   * configuration comes from the query and session.update.
   */
  presetSession?: TranscriptionSessionPreset;
}

export interface AdmitDeps {
  config: Config;
  db: Db;
  nats: Nats;
  router?: WorkerRouter;
  flag: GatewayFlag;
  leases: Leases;
  /** Keys in memory, the revocation feed and the failed-authentication throttle. */
  keyCache: KeyCache;
  /** Records key use (lastUsedAt). */
  keys: Pick<KeyStore, "recordUse">;
  /** The live audio budget. */
  usage: Pick<UsageStore, "budget">;
  limitsFor: (principal: Principal) => Limits;
  /** The plane's headroom (headroom.ts). */
  headroom: Pick<Headroom, "claim" | "settled">;
  now: () => Date;
  logger: Logger;
}

/** The 503's message per refusal (the code is upstream_unavailable, with Retry-After). */
const REFUSALS: Record<RefusalReason, string> = {
  engine_saturated: "Transcription capacity is saturated (utterances are waiting for an engine); retry later.",
  session_cap: "This gateway holds as many realtime sessions as it is configured for (RT_MAX_SESSIONS); retry later.",
  gateway_busy: "The realtime plane is at capacity (the gateway is busy); retry later.",
  vad_behind: "The realtime plane is at capacity (voice activity detection is behind); retry later.",
  decisions_late: "The realtime plane is at capacity (voice activity decisions are running late); retry later.",
  engine_full: "Streaming recognition is at capacity (every decoder is taken by a speaker); retry later.",
  engine_busy: "Streaming recognition is at capacity (the engine cannot take another speaker); retry later.",
  audio_backlog: "The realtime plane is at capacity (audio is waiting to be stored); retry later.",
  admission_burst: "Too many realtime sessions are starting at once; retry in a moment.",
  plane_full: "The realtime plane is at capacity (the sessions open fill the share of the machine they are predicted to); retry later.",
};

function newSessionId(): string {
  return `sess_${randomBytes(12).toString("hex")}`;
}

/**
 * Who is upgrading. The credential comes from the Authorization header, else from the
 * `openai-insecure-api-key.` subprotocol entry (browsers), else, for an `rt_` token only,
 * from `?access_token=` (alias `?token=`). Keys and `ek_` secrets in a URL are refused.
 * An `sk-` key is checked by the key cache; an `ek_` secret (client-secret.ts) is
 * reusable until it expires; an `rt_` token is single use: the first upgrade that
 * presents it spends it in the shared `leases` bucket (spent-tokens.ts), so a second
 * one, on any gateway, is 401. Failed attempts of every kind count against the
 * address's throttle.
 */
export async function authenticateUpgrade(deps: Pick<AdmitDeps, "db" | "config" | "nats" | "keyCache">, req: UpgradeRequest, now: Date): Promise<Principal> {
  const url = new URL(`http://x/?${req.query}`);
  refuseKeysInUrl(url);
  const queryToken = url.searchParams.get("access_token") ?? url.searchParams.get("token");
  const signedByUs = (verify: () => Promise<Principal>) =>
    deps.keyCache.throttled(req.source, async () => {
      const principal = await verify();
      // the credential's key is read from api_keys, which may not have applied a revocation yet
      if (deps.keyCache.isRevoked(principal.keyId)) throw unauthorized("revoked_api_key", "This API key has been revoked.");
      return principal;
    });
  const redeem = (token: string) =>
    signedByUs(() => redeemSessionToken(deps.db, deps.config.auth.sessionTokenSecret, token, now, spendTokensInLeases(deps.nats), deps.config.plans));
  const credential = req.authorization.trim() !== "" ? bearerCredential(req.authorization) : parseWebSocketProtocols(req.protocols).credential;
  if (credential !== null) {
    if (credential.startsWith(SESSION_TOKEN_PREFIX)) return redeem(credential);
    if (credential.startsWith(CLIENT_SECRET_PREFIX)) return signedByUs(() => verifyClientSecret(deps.db, deps.config.auth.sessionTokenSecret, credential, now, deps.config.plans));
    return deps.keyCache.authenticate(`Bearer ${credential}`, now, req.source);
  }
  if (queryToken !== null && queryToken !== "") {
    if (!queryToken.startsWith(SESSION_TOKEN_PREFIX)) throw unauthorized("invalid_session_token", "Invalid or expired session token.");
    return redeem(queryToken);
  }
  throw unauthorized(
    "missing_api_key",
    "Missing credentials: send 'Authorization: Bearer <sk- key or ek_ secret>', from a browser the subprotocol 'openai-insecure-api-key.<ek_ secret>', or a session token as ?access_token=rt_….",
  );
}

/** The audio parameters of an upgrade's query (sample_rate, channels, language, keyterms), or the validation error refusing it. */
export function parseAudioParams(query: string, defaultRate: number) {
  const url = new URL(`http://x/?${query}`);
  const rateParam = url.searchParams.get("sample_rate");
  const sampleRate = rateParam === null ? defaultRate : Number(rateParam);
  if (!(SUPPORTED_SAMPLE_RATES as readonly number[]).includes(sampleRate)) {
    throw validationError("invalid_sample_rate", `sample_rate must be one of ${SUPPORTED_SAMPLE_RATES.join(", ")} (Hz); audio is PCM16LE.`, { param: "sample_rate" });
  }
  const channelsParam = url.searchParams.get("channels");
  const channels = channelsParam === null ? 1 : Number(channelsParam);
  if (channels !== 1 && channels !== 2) throw validationError("invalid_channels", "channels must be 1 or 2 (interleaved).", { param: "channels" });
  const multichannelParam = url.searchParams.get("multichannel");
  if (multichannelParam !== null && multichannelParam !== "true" && multichannelParam !== "false") {
    throw validationError("invalid_multichannel", "multichannel must be true or false.", { param: "multichannel" });
  }
  const multichannel = multichannelParam === "true";
  const language = url.searchParams.get("language");
  if (language !== null && !/^[a-zA-Z]{2,3}([-_][a-zA-Z0-9]{2,8})?$/.test(language)) {
    throw validationError("invalid_language", "language must be an ISO-639-1 code such as 'en'.", { param: "language" });
  }
  const keytermParams = url.searchParams.getAll("keyterms");
  const keyterms = keytermParams.length ? keytermValues.safeParse(keytermParams) : undefined;
  if (keyterms && !keyterms.success) throw validationError("invalid_request", `keyterms: ${keyterms.error.issues[0]!.message.replace(/^keyterms: /, "")}`, { param: "keyterms" });
  return { sampleRate, channels, multichannel, language, ...(keyterms?.data.length ? { keyterms: keyterms.data } : {}) };
}

export async function admit(deps: AdmitDeps, req: UpgradeRequest): Promise<Admission> {
  if (!deps.config.gateway.enabled || deps.flag.disabled()) {
    throw new AppError("unavailable", "gateway_disabled", "The realtime gateway is disabled by the operator; retry later or use the segment endpoint.");
  }
  const now = deps.now();
  const principal = await authenticateUpgrade(deps, req, now);
  // lastUsedAt counts WebSocket use too (throttled to one KeyUsed per key per minute)
  deps.keys.recordUse(principal, now);
  if (deps.router && !deps.router.available()) {
    const retryAfter = Math.max(1, Math.ceil(deps.router.retryAfterSeconds()));
    throw new AppError("unavailable", "upstream_unavailable", "Transcription workers are unavailable (circuit breaker open); retry later.", {
      headers: { "Retry-After": String(retryAfter) },
    });
  }
  // Headroom (domain/sessions/admission.ts): the sessions already admitted keep their
  // latency; the one the plane cannot serve now is refused before session.created.
  const verdict = deps.headroom.claim();
  if (!verdict.admit) {
    throw new AppError("unavailable", "upstream_unavailable", `${REFUSALS[verdict.reason]} Measured: ${verdict.cause}.`, { headers: { "Retry-After": String(verdict.retryAfterSeconds) } });
  }
  try {
    return await admitted(deps, req, principal, now);
  } catch (err) {
    deps.headroom.settled(); // refused after all: no longer in flight
    throw err;
  }
}

/** The rest of an admission the plane has room for: the key's audio budget, handshake rate and concurrent sessions, and the audio parameters. */
async function admitted(deps: AdmitDeps, req: UpgradeRequest, principal: Principal, now: Date): Promise<Admission> {
  const params = parseAudioParams(req.query, deps.config.realtime.defaultSampleRate);
  const limits = deps.limitsFor(principal);
  const budget = deps.usage.budget({ keyId: principal.keyId, limits }, now);
  const left = await budget.remaining();
  const remaining = Number.isFinite(left) ? Math.floor(left) : limits.maxAudioSecondsPerSession;
  await consumeRate(deps.nats, principal.keyId, "connections", limits.maxConnectionsPerMinute, now);
  const sessionId = newSessionId();
  await deps.leases.acquire(principal.keyId, sessionId, limits.maxConcurrentConnections);
  return {
    sessionId,
    requestId: randomUUID(),
    principal,
    limits,
    sampleRate: params.sampleRate,
    channels: params.channels,
    multichannel: params.multichannel,
    remainingAudioSeconds: remaining,
    budget,
    language: params.language,
    prompt: null,
    ...(params.keyterms ? { keyterms: params.keyterms } : {}),
    ...(principal.presetSession ? { presetSession: principal.presetSession } : {}),
  };
}
