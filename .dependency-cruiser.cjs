/**
 * The layering of this repository (docs/DEVELOPING.md, "Architecture checks"), checked by
 * dependency-cruiser in `scripts/check-architecture.sh` (part of `scripts/test.sh`, so
 * of `.ci/run`):
 *
 *   schemas/          wire shapes (zod): imports only schemas/ and npm packages
 *   shared/           adapters (NATS, Postgres, objects, workers, config…): shared/, schemas/
 *   domain/<agg>/     one folder per aggregate: domain/, shared/, schemas/
 *   services/<X>/     one deployable each: its own folder, services/context.ts, domain/,
 *                     shared/, schemas/; never another service's folder
 *   services/stt/     the composition root: may import every service
 *
 * Type-only imports count (tsPreCompilationDeps): a type shared across the line is a
 * dependency all the same. No file may take part in an import circle.
 */
const code = "^(services|domain|shared|schemas)/";

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "An import circle: split the shared part into a module both sides import.",
      from: { path: code },
      to: { circular: true },
    },
    {
      name: "schemas-import-only-schemas",
      severity: "error",
      comment: "schemas/ holds wire shapes only: it imports schemas/ and npm packages, nothing in-repo above it.",
      from: { path: "^schemas/" },
      to: { path: "^(services|domain|shared|bin)/" },
    },
    {
      name: "shared-imports-only-adapters",
      severity: "error",
      comment: "shared/ holds adapters: it imports shared/ and schemas/, no domain or service code.",
      from: { path: "^shared/" },
      to: { path: "^(services|domain|bin)/" },
    },
    {
      name: "domain-imports-no-services",
      severity: "error",
      comment: "domain/ (the aggregates) imports domain/, shared/ and schemas/: services wire it, never the other way round.",
      from: { path: "^domain/" },
      to: { path: "^(services|bin)/" },
    },
    {
      name: "no-service-to-service",
      severity: "error",
      comment:
        "A service imports its own folder, services/context.ts, domain/, shared/ and schemas/; what two services share belongs in domain/ (an aggregate) or shared/ (an adapter). Only services/stt/ (the composition root) imports services.",
      from: { path: "^services/([^/]+)/", pathNot: "^services/stt/" },
      to: { path: "^services/", pathNot: ["^services/$1/", "^services/context\\.ts$"] },
    },
    {
      name: "context-imports-no-service",
      severity: "error",
      comment: "services/context.ts (what the composition root hands every service) and any file beside it name shared/ and domain/ types only.",
      from: { path: "^services/[^/]+$" },
      to: { path: "^services/[^/]+/" },
    },
    {
      name: "code-imports-no-tests",
      severity: "error",
      comment: "Code never imports tests, benchmarks or scripts (a unit test beside the code may use test/support/).",
      from: { path: code, pathNot: "\\.test\\.ts$" },
      to: { path: "^(test|bench|scripts)/" },
    },
    {
      name: "not-to-unresolvable",
      severity: "error",
      comment: "An import that resolves to nothing (a moved file, a missing package).",
      from: { path: code },
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "(^|/)node_modules/|^build/|^\\.stryker-tmp/|^reports/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      extensions: [".ts", ".js", ".mjs", ".cjs", ".json", ".d.ts"],
    },
    reporterOptions: {
      text: { highlightFocused: true },
    },
  },
};
