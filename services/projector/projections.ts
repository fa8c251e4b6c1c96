import type { Config } from "../../shared/config";
import type { Topology } from "../../shared/nats";
import type { Projection } from "../../shared/projection";
import { jobsProjection } from "../../domain/jobs/projection";
import { keysProjection } from "../../domain/keys/projection";
import { usageProjection } from "../../domain/usage/projection";

/** Every read model of the service, by name (`stt rebuild <name>`). */
export function allProjections(topology: Topology, config: Config): Projection<any>[] {
  return [keysProjection(topology), usageProjection(topology, config.usage.windowSeconds), jobsProjection(topology)];
}
