import { Parser } from "@asyncapi/parser";
import { describe, expect, it } from "vitest";
import { CLOSE, clientMessage, serverEvent } from "../../schemas/realtime";
import { openAiClientEvent, openAiServerEvent } from "../../schemas/openai-realtime";
import { messageChecker, serverEventTypes } from "../../test/support/documented-messages";
import { buildAsyncApiDocument, DOOR_CHANNELS } from "./asyncapi";

const doc = buildAsyncApiDocument({ protocol: "wss", host: "stt.example.com", pathname: "/base/" }) as any;
const typesOf = (union: { options: readonly { shape: { type: { value: string } } }[] }) => union.options.map((o) => o.shape.type.value);

describe("the AsyncAPI document of the realtime doors", () => {
  it("parses with @asyncapi/parser without error or warning", async () => {
    const { document, diagnostics } = await new Parser().parse(doc);
    expect(diagnostics.map((d) => `${d.severity} ${d.code} ${d.message} at ${d.path.join("/")}`)).toEqual([]);
    expect(document!.servers().all()[0]!.url()).toBe("wss://stt.example.com/base");
  });

  it("describes every message of the zod unions the gateway parses and sends, each with a summary", () => {
    const native = doc.channels[DOOR_CHANNELS.native];
    const openai = doc.channels[DOOR_CHANNELS.openai];
    expect(Object.keys(native.messages).sort()).toEqual(["audio", ...typesOf(clientMessage), ...typesOf(serverEvent)].sort());
    expect(Object.keys(openai.messages).sort()).toEqual([...typesOf(openAiClientEvent), ...typesOf(openAiServerEvent)].sort());
    expect(serverEventTypes(doc, "native").sort()).toEqual(typesOf(serverEvent).sort());
    expect(serverEventTypes(doc, "openai").sort()).toEqual(typesOf(openAiServerEvent).sort());
    for (const m of [...Object.values(native.messages), ...Object.values(openai.messages)] as any[]) expect(m.summary.length, m.name).toBeGreaterThan(10);
  });

  it("lists every close code with its reason, and the door's 4000", () => {
    const codes = (channel: string) => doc.channels[channel]["x-close-codes"].map((c: any) => `${c.code} ${c.reason}`);
    for (const c of Object.values(CLOSE)) {
      expect(codes(DOOR_CHANNELS.native)).toContain(`${c.code} ${c.reason}`);
      expect(codes(DOOR_CHANNELS.openai)).toContain(`${c.code} ${c.reason}`);
    }
    expect(codes(DOOR_CHANNELS.openai)).toContain("4000 invalid_request_error.invalid_value");
  });

  it("has the upgrade's query parameters as WebSocket bindings", () => {
    expect(Object.keys(doc.channels[DOOR_CHANNELS.native].bindings.ws.query.properties)).toEqual(
      expect.arrayContaining(["access_token", "sample_rate", "channels", "multichannel", "language", "resume", "last_event_id"]),
    );
    expect(Object.keys(doc.channels[DOOR_CHANNELS.openai].bindings.ws.query.properties)).toEqual(expect.arrayContaining(["intent", "model", "resume", "last_event_id"]));
  });

  it("server payloads are closed: a field the schema lacks, or a type the door does not send, is reported", () => {
    const check = messageChecker(doc);
    const cleared = { type: "input_audio_buffer.cleared", event_id: "evt_1" };
    expect(check("native", cleared)).toBeNull();
    expect(check("native", { ...cleared, channel: 1 })).toBeNull();
    expect(check("native", { ...cleared, undocumented: true })).toMatch(/additional properties/);
    expect(check("native", { type: "input_audio_buffer.speech_paused", event_id: "evt_1" })).toMatch(/not a server event/);
    expect(check("native", { type: "conversation.item.added", event_id: "evt_1" })).toMatch(/not a server event/); // the door's, not the native stream's
  });
});
