import { z } from "zod";
import { CLOSE, clientMessage, REALTIME_PATH, serverEvent } from "../../schemas/realtime";
import { OPENAI_BETA_SUBPROTOCOL, OPENAI_INTENT_CLOSE, OPENAI_MAX_TEXT_FRAME_BYTES, OPENAI_REALTIME_PATH, openAiClientEvent, openAiServerEvent } from "../../schemas/openai-realtime";
import { CLOSE_TEXT, NATIVE_CLIENT_TEXT, NATIVE_SERVER_TEXT, OPENAI_CLIENT_TEXT, OPENAI_SERVER_TEXT, type MessageText } from "./asyncapi-messages";
import { nativeStreamQuery, openAiDoorQuery } from "./routes/stream-doc";

/**
 * The realtime protocol as an AsyncAPI 3 document (GET /asyncapi.json): both doors, the
 * native stream and the OpenAI Realtime door, as channels; every client and server
 * message with its payload converted from the zod schema the gateway parses or types it
 * with (zod's own JSON Schema output, draft-07, which is what AsyncAPI's default schema
 * format extends); the query parameters and headers of the upgrade as WebSocket channel
 * bindings; close codes as `x-close-codes`; authentication as security schemes. Server
 * payloads are the schemas' output shapes (closed objects: a field the gateway sends
 * must be in its schema), client payloads their input shapes (unknown fields are
 * dropped by the gateway, so they are not refused here either).
 */

const ASYNCAPI_VERSION = "3.1.0";
/** Channel ids in the document. */
export const DOOR_CHANNELS = { native: "nativeStream", openai: "openaiRealtime" } as const;
export type Door = keyof typeof DOOR_CHANNELS;

type JsonSchema = Record<string, unknown>;

const JSON_SCHEMA_FORMATS = new Set(["date-time", "date", "time", "email", "hostname", "ipv4", "ipv6", "uri", "uri-reference", "uuid", "regex", "binary"]);

/**
 * zod's JSON Schema of one message. Two tidy-ups: zod names some checks as formats JSON
 * Schema does not know (`startsWith` becomes `format: "starts_with"` beside its
 * `pattern`), which validators refuse or ignore, so they go; and `.int()`'s bounds of
 * ±2^53−1 say nothing a client needs.
 */
function jsonSchemaOf(schema: z.ZodType, io: "input" | "output"): JsonSchema {
  const { $schema: _, ...json } = z.toJSONSchema(schema, {
    target: "draft-7",
    io,
    unrepresentable: "any",
    override: ({ jsonSchema }) => {
      const s = jsonSchema as JsonSchema;
      if (typeof s.format === "string" && !JSON_SCHEMA_FORMATS.has(s.format)) delete s.format;
      if (s.minimum === Number.MIN_SAFE_INTEGER) delete s.minimum;
      if (s.maximum === Number.MAX_SAFE_INTEGER) delete s.maximum;
    },
  }) as JsonSchema;
  return json;
}

interface Message {
  name: string;
  title: string;
  summary: string;
  description?: string;
  contentType: string;
  payload: JsonSchema;
}

/** One message per option of a discriminated union on `type`, described by `texts`. */
function messagesOf(union: { options: readonly z.ZodObject[] }, texts: Record<string, MessageText>, io: "input" | "output"): Record<string, Message> {
  const out: Record<string, Message> = {};
  for (const option of union.options) {
    const type = (option.shape.type as z.ZodLiteral<string>).value;
    const text = texts[type];
    if (!text) throw new Error(`the realtime message ${type} has no description in asyncapi-messages.ts`);
    out[type] = { name: type, title: type, ...text, contentType: "application/json", payload: jsonSchemaOf(option, io) };
  }
  return out;
}

const audioFrame: Message = {
  name: "audio",
  title: "audio (binary frame)",
  summary: "PCM16LE audio at the declared `sample_rate` and `channels` (interleaved), up to 1 MiB a frame",
  description:
    "Whole samples only (a multiple of 2 × `channels` bytes); a frame that is not is dropped and answered with `error` `invalid_audio_frame`. Any size and cut; about 20–100 ms a frame in real time (faster is fine). Over 1 MiB: close 1009.",
  contentType: "application/octet-stream",
  payload: { type: "string", format: "binary" },
};

const closeCodes = (extra: { code: number; reason: string; description: string }[] = []) => [
  ...Object.entries(CLOSE).map(([name, c]) => ({ code: c.code, reason: c.reason, description: CLOSE_TEXT[name as keyof typeof CLOSE] })),
  ...extra,
];

const ref = (path: string) => ({ $ref: path });
const securityRefs = ["bearer", "sessionToken", "browserSubprotocol"].map((name) => ref(`#/components/securitySchemes/${name}`));

const upgradeHeaders = (door: Door): JsonSchema => ({
  type: "object",
  properties: {
    Authorization: { type: "string", description: "`Bearer sk-…` (an API key), `Bearer ek_…` (a client secret) or `Bearer rt_…` (a session token)" },
    "Sec-WebSocket-Protocol": {
      type: "string",
      description: `Browsers: \`realtime, openai-insecure-api-key.<ek_… secret>\`; the 101 answers exactly \`realtime\` when offered, never a credential.${door === "openai" ? ` \`${OPENAI_BETA_SUBPROTOCOL}\` chooses the beta shapes.` : ""}`,
    },
    ...(door === "openai" ? { "OpenAI-Beta": { type: "string", enum: ["realtime=v1"], description: "Beta event shapes (`transcription_session.*`)" } } : {}),
  },
});

interface DoorSpec {
  door: Door;
  address: string;
  title: string;
  description: string;
  query: JsonSchema;
  client: Record<string, Message>;
  server: Record<string, Message>;
  closes: ReturnType<typeof closeCodes>;
}

/** Keyed by `type`: a client message and a server event of one door never share one (it would make a `type` ambiguous to read). */
function messagesOfChannel(d: DoorSpec): Record<string, Message> {
  const shared = Object.keys(d.client).filter((k) => k in d.server);
  if (shared.length) throw new Error(`${d.door}: ${shared.join(", ")} is both a client message and a server event`);
  return { ...d.client, ...d.server };
}

function channelOf(d: DoorSpec) {
  return {
    address: d.address,
    title: d.title,
    description: d.description,
    servers: [ref("#/servers/gateway")],
    messages: messagesOfChannel(d),
    bindings: { ws: { method: "GET", query: d.query, headers: upgradeHeaders(d.door), bindingVersion: "0.1.0" } },
    "x-close-codes": d.closes,
  };
}

function operationsOf(d: DoorSpec) {
  const channel = DOOR_CHANNELS[d.door];
  const refs = (messages: Record<string, Message>) => Object.keys(messages).map((k) => ref(`#/channels/${channel}/messages/${k}`));
  return {
    [`${d.door}ReceiveClientMessages`]: { action: "receive", channel: ref(`#/channels/${channel}`), title: `${d.title}: what a client sends`, messages: refs(d.client) },
    [`${d.door}SendServerEvents`]: { action: "send", channel: ref(`#/channels/${channel}`), title: `${d.title}: what the server sends`, messages: refs(d.server) },
  };
}

let doors: DoorSpec[] | undefined;

/** The doors' channels, built once from the schemas (the server part of the document is per request). */
function doorSpecs(): DoorSpec[] {
  doors ??= [
    {
      door: "native",
      address: REALTIME_PATH,
      title: "Native realtime stream",
      description:
        "Binary frames of PCM16LE audio and JSON text messages in; JSON events out, first `session.created`. The server's VAD (server_vad, semantic_vad or manual commits) cuts the audio into items; each committed item gets exactly one `completed` or `failed`. Times are milliseconds on the session's audio timeline. A multichannel session (`channels=2&multichannel=true`) adds `channel` to every event of a channel's items. A connection lost without a close frame (1006) or closed 1012 can be resumed with `?resume=` and `last_event_id`. Upgrade refusals are HTTP answers, described in /openapi.json. Guide: docs/realtime.md.",
      query: jsonSchemaOf(nativeStreamQuery, "input"),
      client: { audio: audioFrame, ...messagesOf(clientMessage, NATIVE_CLIENT_TEXT, "input") },
      server: messagesOf(serverEvent, NATIVE_SERVER_TEXT, "output"),
      closes: closeCodes(),
    },
    {
      door: "openai",
      address: OPENAI_REALTIME_PATH,
      title: "OpenAI Realtime door (transcription sessions)",
      description: `OpenAI's Realtime API for transcription sessions, GA and beta shapes, so unmodified OpenAI clients work with the base URL and key changed. JSON text frames only (up to ${OPENAI_MAX_TEXT_FRAME_BYTES / 1024 / 1024} MiB; a binary frame is answered with \`error\` \`invalid_event\`). The same sessions as the native stream; additions: \`resume\` in \`session.created\` and the \`session.resumed\` event. Guide: docs/realtime-openai.md.`,
      query: jsonSchemaOf(openAiDoorQuery, "input"),
      client: messagesOf(openAiClientEvent, OPENAI_CLIENT_TEXT, "input"),
      server: messagesOf(openAiServerEvent, OPENAI_SERVER_TEXT, "output"),
      closes: closeCodes([{ ...OPENAI_INTENT_CLOSE, description: "an `?intent` other than `transcription`, after an `error` event (OpenAI's close)" }]),
    },
  ];
  return doors;
}

/** Where clients connect: `ws`/`wss`, host and optional base path, from PUBLIC_BASE_URL or the request. */
export interface AsyncApiServer {
  protocol: "ws" | "wss";
  host: string;
  pathname?: string;
}

/** The AsyncAPI 3 document of both realtime doors. */
export function buildAsyncApiDocument(server: AsyncApiServer) {
  const specs = doorSpecs();
  return {
    asyncapi: ASYNCAPI_VERSION,
    info: {
      title: "Speech Transcription Service: realtime protocol",
      version: "1.0.0",
      description:
        "The WebSocket doors of the realtime plane. The HTTP routes (including the session-token and client-secret routes and each upgrade's refusals) are in /openapi.json.",
    },
    defaultContentType: "application/json",
    servers: {
      gateway: {
        host: server.host,
        protocol: server.protocol,
        ...(server.pathname && server.pathname !== "/" ? { pathname: server.pathname.replace(/\/$/, "") } : {}),
        title: "Realtime gateway",
        security: securityRefs,
      },
    },
    channels: Object.fromEntries(specs.map((d) => [DOOR_CHANNELS[d.door], channelOf(d)])),
    operations: Object.assign({}, ...specs.map(operationsOf)),
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description: "`Authorization: Bearer sk-…` (servers), `Bearer ek_…` (a client secret from POST /v1/realtime/client_secrets: reusable until it expires; on /v1/realtime its session config is the session's start) or `Bearer rt_…`",
        },
        sessionToken: {
          type: "httpApiKey",
          name: "access_token",
          in: "query",
          description: "Browsers: `?access_token=rt_…` (or `?token=`), from POST /v1/audio/transcriptions/session-token: 60 s, opens one connection. An `sk-` key or `ek_` secret in the URL is refused.",
        },
        browserSubprotocol: {
          type: "httpApiKey",
          name: "Sec-WebSocket-Protocol",
          in: "header",
          description: "Browsers with a client secret (as OpenAI's SDK does): offer `realtime` and `openai-insecure-api-key.ek_…`. The 101 answers `realtime`.",
        },
      },
    },
  };
}
