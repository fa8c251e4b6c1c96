import { connectNats, destroyTopology, type Nats } from "../../shared/nats";
import { randomId } from "./stack";

/** A NATS adapter on its own random prefix; destroy() deletes its streams and buckets. */
export async function isolatedNats(): Promise<Nats & { destroy(): Promise<void> }> {
  const nats = await connectNats({ url: process.env.NATS_URL ?? "nats://127.0.0.1:4222", prefix: `t${randomId()}` });
  return Object.assign(nats, {
    destroy: async () => {
      await destroyTopology(nats);
      await nats.close();
    },
  });
}
