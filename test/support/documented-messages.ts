import Ajv, { type ValidateFunction } from "ajv";
import { REALTIME_PATH } from "../../schemas/realtime";
import { OPENAI_REALTIME_PATH } from "../../schemas/openai-realtime";
import { buildAsyncApiDocument, DOOR_CHANNELS, type Door } from "../../services/http-gateway/asyncapi";

/**
 * Every server message a realtime test receives through `connectRt` is checked against
 * the AsyncAPI document (/asyncapi.json, services/http-gateway/asyncapi.ts): its `type`
 * must be a server event of the door's channel and the message must validate against
 * that event's payload schema (closed objects, so an undescribed field fails too). The
 * integration project's setup file (documented-messages-guard.ts) turns the check on and
 * fails the test in which an undescribed message arrived; the bench, which uses the
 * same client, leaves it off.
 */

type DocumentedMessage = { payload: object };
type AsyncApiDocument = { channels: Record<string, { messages: Record<string, DocumentedMessage> }>; operations: Record<string, { action: string; channel: { $ref: string }; messages: { $ref: string }[] }> };

/** The `type`s of the server events a door's channel describes, read from the document as a client would. */
export function serverEventTypes(doc: AsyncApiDocument, door: Door): string[] {
  const channel = `#/channels/${DOOR_CHANNELS[door]}`;
  const send = Object.values(doc.operations).find((o) => o.action === "send" && o.channel.$ref === channel);
  if (!send) throw new Error(`no send operation on ${channel}`);
  return send.messages.map((m) => m.$ref.slice(`${channel}/messages/`.length));
}

/** A checker of one door's server messages against a document: null when described, else why not. */
export function messageChecker(doc: AsyncApiDocument) {
  const ajv = new Ajv({ allErrors: true, validateFormats: false });
  const validators = new Map<string, ValidateFunction>();
  for (const door of Object.keys(DOOR_CHANNELS) as Door[]) {
    for (const type of serverEventTypes(doc, door)) validators.set(`${door} ${type}`, ajv.compile(doc.channels[DOOR_CHANNELS[door]]!.messages[type]!.payload));
  }
  return (door: Door, message: Record<string, unknown>): string | null => {
    const type = String(message.type);
    const validate = validators.get(`${door} ${type}`);
    if (!validate) return `${door}: ${JSON.stringify(message.type)} is not a server event of ${DOOR_CHANNELS[door]}`;
    const described = validate(message);
    return described ? null : `${door} ${type}: ${ajv.errorsText(validate.errors)}`;
  };
}

/** Which door a WebSocket URL opens, or null for another path. */
function doorOf(url: string): Door | null {
  const path = new URL(url).pathname;
  if (path.endsWith(OPENAI_REALTIME_PATH)) return "openai";
  if (path.endsWith(REALTIME_PATH)) return "native";
  return null;
}

let check: ReturnType<typeof messageChecker> | null = null;
let enabled = false;
const problems: string[] = [];

/** Turns the check on (the integration project's setup file). */
export function checkReceivedMessages(): void {
  enabled = true;
}

/** Called by connectRt with every server message, before it adds anything to it. */
export function noteReceived(url: string, message: Record<string, unknown>): void {
  if (!enabled) return;
  const door = doorOf(url);
  if (!door) return;
  check ??= messageChecker(buildAsyncApiDocument({ protocol: "ws", host: "localhost" }) as unknown as AsyncApiDocument);
  const problem = check(door, message);
  if (problem) problems.push(`${problem} in ${JSON.stringify(message).slice(0, 400)}`);
}

/** The problems noted since the last call. */
export function takeProblems(): string[] {
  return problems.splice(0);
}
