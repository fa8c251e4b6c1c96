import type { KV } from "@nats-io/kv";
import type { Nats } from "../../shared/nats";

/**
 * The operator's runtime switch for the realtime gateway: KV bucket `flags`, key
 * `realtime_gateway_disabled`; a value of "1"/"true" refuses new upgrades with 503
 * gateway_disabled on every gateway sharing NATS (open sessions continue). Every
 * gateway watches the key, so a flip applies within milliseconds without a restart.
 * `GATEWAY_ENABLED=false` disables a gateway process regardless of the flag.
 */
const GATEWAY_DISABLED_KEY = "realtime_gateway_disabled";

const truthy = (v: string) => ["1", "true", "yes", "on"].includes(v.trim().toLowerCase());

/** Sets the switch (operators: `nats kv put <PREFIX>_flags realtime_gateway_disabled 1`). */
export async function setRealtimeGatewayEnabled(nats: Nats, enabled: boolean): Promise<void> {
  const kv = await nats.kv("flags");
  await kv.put(GATEWAY_DISABLED_KEY, enabled ? "0" : "1");
}

export interface GatewayFlag {
  disabled(): boolean;
  stop(): void;
}

export async function watchGatewayFlag(kv: KV): Promise<GatewayFlag> {
  let disabled = false;
  const initial = await kv.get(GATEWAY_DISABLED_KEY);
  if (initial && initial.operation === "PUT") disabled = truthy(initial.string());
  const watch = await kv.watch({ key: GATEWAY_DISABLED_KEY });
  void (async () => {
    for await (const e of watch) disabled = e.operation === "PUT" ? truthy(e.string()) : false;
  })().catch(() => undefined);
  return {
    disabled: () => disabled,
    stop: () => watch.stop(),
  };
}
