import { randomUUID } from "node:crypto";
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { speakerHintProblem, type DiarizeOptions } from "../../../schemas/diarization";
import { openAiError } from "../../../schemas/http";
import {
  jobDefaults,
  jobResult,
  jobView,
  reviewedResult,
  submitJobBody,
  submitJobResponse,
  type JobView,
  type SubmitJobResponse,
  artifactKeys,
} from "../../../schemas/jobs";
import { legacyWorkflowIdFor, workflowIdFor } from "../../../schemas/job-ids";
import { issueErrorCode } from "../../../schemas/safe-string";
import type { Principal } from "../../../domain/keys/auth";
import { withStore } from "../../../shared/db/index";
import { AppError, notFound, validationError } from "../../../shared/errors";
import { getJson } from "../../../shared/objects/index";
import type { ActiveJob } from "../../../domain/jobs/decider";
import type { JobSpec } from "../../../domain/jobs/events";
import { findJob } from "../../../domain/jobs/queries";
import type { JobStore } from "../../../domain/jobs/store";
import { slicingView, stepsView } from "../../../domain/jobs/views";
import { limitRequests, requireApiKey, type GatewayEnv } from "../auth-middleware";
import type { GatewayDeps } from "../deps";

/**
 * Batch jobs over HTTP (spec 4.3, 4.4):
 *
 * - POST /v1/audio/transcriptions/jobs (and the legacy POST /): validate, then append
 *   JobSubmitted to the job's subject. The workflow id is derived from the owner and
 *   the request_id (schemas/job-ids.ts), so a tenant resubmitting a request_id gets the
 *   same job: the append is a no-op, or resumes the job from its checkpoints when it had
 *   errored. Another tenant using the same request_id gets a job of its own.
 * - GET …/jobs/{workflowId}, …/transcriptions/{workflowId} and /{workflowId}: the
 *   Postgres read model; a key sees only its own tenant's jobs (404 otherwise). The
 *   output is read from result.json / reviewed_result.json in object storage.
 *
 * Polls are not counted against maxRequestsPerMinute (a client polling once a second
 * would exhaust the free plan's 12 per minute); submissions are.
 */
export const JOBS_PATH = "/v1/audio/transcriptions/jobs";
const jobPollPath = (workflowId: string) => `${JOBS_PATH}/${workflowId}`;

const uuidPattern = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
const uuidRegex = new RegExp(`^${uuidPattern}$`);

/**
 * The job a submission names: the owner-scoped id, unless the same owner has a job
 * under the legacy (request_id only) id, submitted before request_ids were scoped;
 * resubmitting that one must still resume it. Another owner's legacy job is ignored,
 * so nothing about it shows.
 */
async function workflowIdOfSubmission(store: JobStore, ownerId: string, requestId: string): Promise<string> {
  const legacyId = legacyWorkflowIdFor(requestId);
  const { state } = await store.load(legacyId);
  return state.status !== "none" && state.spec.ownerId === ownerId ? legacyId : workflowIdFor(ownerId, requestId);
}

/** Largest submission body: the job's options travel in one JetStream event. */
const MAX_SUBMISSION_BYTES = 256 * 1024;

/**
 * Parses a raw body into a job submission: 400 `invalid_json` / `invalid_request`, or
 * `invalid_string` when a string (a `metadata` key or value included) holds something
 * Postgres cannot store, so it never reaches the event log.
 */
function parseSubmission(raw: string): z.infer<typeof submitJobBody> {
  if (Buffer.byteLength(raw, "utf8") > MAX_SUBMISSION_BYTES) {
    throw new AppError("too_large", "request_too_large", `the request body is larger than ${MAX_SUBMISSION_BYTES} bytes`);
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw validationError("invalid_json", "the request body must be a JSON object");
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    throw validationError("invalid_json", "the request body must be a JSON object");
  }
  const parsed = submitJobBody.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = issue.path.join(".") || undefined;
    const missing = issue.code === "invalid_type" && (json as Record<string, unknown>)[String(issue.path[0])] === undefined;
    const message = missing ? `${param} is required` : param && !issue.message.includes(param) ? `${param}: ${issue.message}` : issue.message;
    // A string Postgres cannot store is `invalid_string` on every field, audio_url included.
    const fallback = param === "audio_url" ? (missing ? "missing_audio_url" : "invalid_audio_url") : "invalid_request";
    throw validationError(issueErrorCode(issue, fallback), message, { param });
  }
  if (parsed.data.redact_audio && parsed.data.multichannel) {
    throw validationError("unsupported_combination", "redact_audio and multichannel cannot be combined yet: redacted_audio.wav is mono", { param: "redact_audio" });
  }
  if (parsed.data.redact_audio && !parsed.data.redact) throw validationError("invalid_request", "redact_audio needs redact (which entities to silence)", { param: "redact_audio" });
  const b = parsed.data;
  if (!b.diarize && (b.speakers ?? b.min_speakers ?? b.max_speakers) !== undefined) {
    const param = b.speakers !== undefined ? "speakers" : b.min_speakers !== undefined ? "min_speakers" : "max_speakers";
    throw validationError("invalid_request", `${param} needs diarize: true`, { param });
  }
  if (b.diarize && b.multichannel) throw validationError("unsupported_combination", "diarize and multichannel cannot be combined: with multichannel, each segment's channel says who spoke", { param: "diarize" });
  const problem = b.diarize ? speakerHintProblem(diarizeOf(b)) : undefined;
  if (problem) throw validationError("invalid_request", problem[1], { param: problem[0] });
  return parsed.data;
}

/** The body's speaker count hint as the job's spec keeps it. */
function diarizeOf(body: z.infer<typeof submitJobBody>): DiarizeOptions {
  return {
    ...(body.speakers !== undefined ? { speakers: body.speakers } : {}),
    ...(body.min_speakers !== undefined ? { minSpeakers: body.min_speakers } : {}),
    ...(body.max_speakers !== undefined ? { maxSpeakers: body.max_speakers } : {}),
  };
}

/**
 * Submits (or resubmits) a batch job for `principal` from a raw JSON body and returns
 * the 202 body. Also used by the deprecated JSON branch of POST /v1/audio/transcriptions.
 */
export async function submitJob(deps: GatewayDeps, principal: Principal, rawBody: string): Promise<SubmitJobResponse> {
  const body = parseSubmission(rawBody);
  const now = deps.now();
  if (principal.limits.maxAudioSecondsPerWindow > 0) {
    const remaining = await deps.usage.budget(principal, now).remaining();
    if (remaining <= 0) {
      throw new AppError("rate_limited", "audio_quota_exhausted", "the audio budget of this key's billing window is used up", { retryable: true });
    }
  }
  const requestId = body.request_id ?? randomUUID();
  const workflowId = await workflowIdOfSubmission(deps.jobs, principal.ownerId, requestId);
  const spec: JobSpec = {
    workflowId,
    requestId,
    ownerId: principal.ownerId,
    keyId: principal.keyId,
    audioUrl: body.audio_url,
    ...(body.language ? { language: body.language } : {}),
    model: body.model ?? jobDefaults.model,
    ...(body.prompt ? { prompt: body.prompt } : {}),
    ...(body.keyterms?.length ? { keyterms: body.keyterms } : {}),
    segmentSeconds: Math.min(jobDefaults.maxSegmentSeconds, Math.max(jobDefaults.minSegmentSeconds, body.segment_seconds ?? jobDefaults.segmentSeconds)),
    concurrency: Math.min(jobDefaults.maxConcurrency, Math.max(1, Math.floor(body.concurrency ?? jobDefaults.concurrency))),
    ...(body.webhook_url ? { webhookUrl: body.webhook_url } : {}),
    review: body.review ?? false,
    smartFormat: body.smart_format ?? true,
    ...(body.redact ? { redact: body.redact } : {}),
    ...(body.redact_audio ? { redactAudio: true } : {}),
    ...(body.metadata ? { metadata: body.metadata } : {}),
    ...(body.diarize ? { diarize: diarizeOf(body) } : {}),
    ...(body.multichannel ? { multichannel: true } : {}),
    maxAudioSeconds: principal.limits.maxAudioSecondsPerRequest,
  };
  await deps.jobs.execute(workflowId, { type: "SubmitJob", spec, now: now.toISOString() });
  return { request_id: requestId, workflow_id: workflowId, status: "queued", endpoint: jobPollPath(workflowId) };
}

/** The poll view of one job, for its owner only. */
async function readJob(deps: GatewayDeps, principal: Principal, workflowId: string): Promise<JobView> {
  const missing = () => notFound("job_not_found", `no job ${workflowId.slice(0, 64)}`);
  if (!uuidRegex.test(workflowId)) throw missing();
  const id = workflowId.toLowerCase();
  const row = await withStore("jobs_unavailable", () => findJob(deps.db, id));
  let view: BareView;
  if (row) {
    view = {
      workflow_id: row.workflow_id,
      request_id: row.request_id,
      owner_id: row.owner_id,
      review: row.review,
      status: row.status,
      steps: row.steps,
      slicing: slicingView(row.state),
      error: row.error ?? null,
      created_at: new Date(row.created_at).toISOString(),
      updated_at: new Date(row.updated_at).toISOString(),
    };
  } else {
    // Just submitted and not projected yet: answer from the aggregate itself, so a poll
    // right after the 202 never sees a 404.
    const { state } = await deps.jobs.load(id);
    if (state.status === "none") throw missing();
    view = viewOfState(id, state);
  }
  return withOutput(deps, principal, view);
}

type BareView = Omit<JobView, "output"> & { owner_id: string; review: boolean };

function viewOfState(id: string, state: ActiveJob): BareView {
  return {
    workflow_id: id,
    request_id: state.spec.requestId,
    owner_id: state.spec.ownerId,
    review: state.spec.review,
    status: state.status,
    steps: stepsView(state),
    slicing: slicingView(state),
    error: state.error ?? null,
    created_at: state.submittedAt,
    updated_at: state.updatedAt,
  };
}

async function withOutput(deps: GatewayDeps, principal: Principal, view: BareView): Promise<JobView> {
  const missing = () => notFound("job_not_found", `no job ${view.workflow_id.slice(0, 64)}`);
  // Another tenant's job is indistinguishable from no job.
  if (view.owner_id !== principal.ownerId) throw missing();
  let output: JobView["output"] = null;
  if (view.status === "complete") {
    if (!deps.objects) throw new AppError("unavailable", "objects_unavailable", "object storage is not configured");
    const job = { workflowId: view.workflow_id, requestId: view.request_id };
    const result = jobResult.safeParse(await getJson(deps.objects, artifactKeys.result(job)));
    if (!result.success) throw new AppError("unavailable", "result_unavailable", "the job's result is not readable right now");
    const reviewed = view.review ? reviewedResult.safeParse(await getJson(deps.objects, artifactKeys.reviewed(job))) : undefined;
    output = { result: result.data, reviewed_result: reviewed?.success ? reviewed.data : null };
  }
  const { owner_id: _owner, review: _review, ...rest } = view;
  return { ...rest, output };
}

/** Cancels the caller's own job (decided on the aggregate, so a race with its steps is safe). */
async function cancelJob(deps: GatewayDeps, principal: Principal, workflowId: string): Promise<JobView> {
  const missing = () => notFound("job_not_found", `no job ${workflowId.slice(0, 64)}`);
  if (!uuidRegex.test(workflowId)) throw missing();
  const id = workflowId.toLowerCase();
  const { state } = await deps.jobs.load(id);
  // Another tenant's job is indistinguishable from no job.
  if (state.status === "none" || state.spec.ownerId !== principal.ownerId) throw missing();
  const { state: after } = await deps.jobs.execute(id, { type: "CancelJob", keyId: principal.keyId, now: deps.now().toISOString() });
  if (after.status === "none") throw missing();
  return withOutput(deps, principal, viewOfState(id, after));
}

const errorResponses = {
  400: { description: "not JSON, or `audio_url`, `segment_seconds`, `concurrency`… invalid", content: { "application/json": { schema: openAiError } } },
  401: { description: "authentication failed", content: { "application/json": { schema: openAiError } } },
  429: { description: "rate limit or `audio_quota_exhausted`", content: { "application/json": { schema: openAiError } } },
};

const submitDescription =
  "Fetches `audio_url`, slices it near silences every `segment_seconds`, transcribes the slices with at most `concurrency` in flight, aggregates, optionally reviews with a language model (`review`) and POSTs the result to `webhook_url` (signed, see docs/jobs.md). Resubmitting a `request_id` returns the same job and resumes it from its stored checkpoints. A `request_id` is scoped to the key's tenant: another tenant using the same value gets a separate job.";

async function handleSubmit(c: Context<GatewayEnv>, deps: GatewayDeps) {
  const body = await submitJob(deps, c.get("principal"), await c.req.text());
  c.header("Location", body.endpoint);
  return c.json(body, 202);
}

/** Registers the submit routes (early) — the poll aliases come from registerJobPollAliases (last). */
export function registerJobsRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  app.use(JOBS_PATH, requireApiKey(deps), limitRequests(deps));
  app.use(`${JOBS_PATH}/*`, requireApiKey(deps));

  const submitRoute = (path: string, summary: string, deprecated = false) =>
    createRoute({
      method: "post",
      path,
      tags: ["batch jobs"],
      summary,
      description: submitDescription,
      deprecated,
      security: [{ bearerAuth: [] }],
      request: { body: { required: true, content: { "application/json": { schema: submitJobBody } } } },
      responses: {
        202: { description: "the job was accepted", content: { "application/json": { schema: submitJobResponse } } },
        ...errorResponses,
      },
    });
  // The body is read raw (not through the validator hook) so that non-JSON gets a clear
  // 400; the route is still described in the OpenAPI document.
  app.openAPIRegistry.registerPath(submitRoute(JOBS_PATH, "Submit a batch transcription job"));
  app.openAPIRegistry.registerPath(submitRoute("/", "Submit a batch job (legacy alias of /v1/audio/transcriptions/jobs)", true));
  app.post(JOBS_PATH, (c) => handleSubmit(c, deps));

  const pollRoute = (path: string, summary: string, deprecated = false) =>
    createRoute({
      method: "get",
      path,
      deprecated,
      tags: ["batch jobs"],
      summary,
      description: "Status (queued → running → complete | errored), per-step records, the output when complete and the error when errored. Other tenants' jobs are 404.",
      security: [{ bearerAuth: [] }],
      request: { params: z.object({ workflowId: z.string() }) },
      responses: {
        200: { description: "the job", content: { "application/json": { schema: jobView } } },
        401: errorResponses[401],
        404: { description: "`job_not_found`", content: { "application/json": { schema: openAiError } } },
      },
    });
  app.openapi(pollRoute(`${JOBS_PATH}/{workflowId}`, "Poll a batch job"), (async (c: Context<GatewayEnv>) =>
    c.json(await readJob(deps, c.get("principal"), c.req.param("workflowId")!), 200)) as never);
  app.openapi(
    createRoute({
      method: "delete",
      path: `${JOBS_PATH}/{workflowId}`,
      tags: ["batch jobs"],
      summary: "Cancel a batch job",
      description:
        "A queued or running job ends `terminated`: steps in flight stop at their next checkpoint and nothing is recorded for the job afterwards; no webhook is sent for it. Cancelling a terminated job again answers the job as it is; a complete or errored job is 409 `job_not_cancellable`. Other tenants' jobs are 404. The audio already transcribed is not billed (usage is recorded only when a job completes).",
      security: [{ bearerAuth: [] }],
      request: { params: z.object({ workflowId: z.string() }) },
      responses: {
        200: { description: "the job, now `terminated`", content: { "application/json": { schema: jobView } } },
        401: errorResponses[401],
        404: { description: "`job_not_found`", content: { "application/json": { schema: openAiError } } },
        409: { description: "`job_not_cancellable`: already complete or errored", content: { "application/json": { schema: openAiError } } },
      },
    }),
    (async (c: Context<GatewayEnv>) => c.json(await cancelJob(deps, c.get("principal"), c.req.param("workflowId")!), 200)) as never,
  );
  app.openAPIRegistry.registerPath(pollRoute("/v1/audio/transcriptions/{workflowId}", "Poll a batch job (alias)", true));
  app.openAPIRegistry.registerPath(pollRoute("/{workflowId}", "Poll a batch job (legacy alias)", true));
}

/**
 * The alias poll routes and the legacy POST /. Registered after every other route:
 * the aliases only match UUID-shaped ids, so they can never shadow a named path.
 */
export function registerJobPollAliases(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  const alias = `/v1/audio/transcriptions/:workflowId{${uuidPattern}}`;
  const legacy = `/:workflowId{${uuidPattern}}`;
  const poll = async (c: Context<GatewayEnv>) => c.json(await readJob(deps, c.get("principal"), c.req.param("workflowId")!), 200);
  app.get(alias, requireApiKey(deps), poll);
  app.get(legacy, requireApiKey(deps), poll);
  app.post("/", requireApiKey(deps), limitRequests(deps), (c) => handleSubmit(c, deps));
}
