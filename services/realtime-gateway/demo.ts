import type { HttpRequest, HttpResponse } from "@trufflesuite/uws-js-unofficial";
import { OPENAI_REALTIME_PATH } from "../../schemas/openai-realtime";
import { REALTIME_PATH } from "../../schemas/realtime";
import { authenticateApiKey, issueSessionToken } from "../../domain/keys/auth";
import { issueClientSecret } from "../../domain/keys/client-secret";
import type { Config } from "../../shared/config";
import type { Db } from "../../shared/db/index";
import { AppError, toAppError } from "../../shared/errors";
import { PLAYGROUND_HTML } from "./playground-page";

/**
 * The playground (GET /demo, alias /playground): a page that streams the microphone or
 * an uploaded file to either realtime door and shows what comes back
 * (playground-page.ts). POST /demo/session-token is its "customer backend": it holds the
 * operator's demo key (RT_DEMO_API_KEY, server-side only) and hands the browser a
 * short-lived credential for one door, exactly what a customer backend does:
 * a 60-second `rt_` session token for the native door (as
 * POST /v1/audio/transcriptions/session-token), or with `?door=openai` a 60-second `ek_`
 * client secret for /v1/realtime (as POST /v1/realtime/client_secrets). Without
 * RT_DEMO_API_KEY the token route answers 503 demo_disabled. The page never sees a key.
 */
export interface DemoDeps {
  config: Config;
  db: Db;
  now: () => Date;
}

const PAGE_PATHS = new Set(["/demo", "/demo/", "/playground", "/playground/"]);
const TOKEN_PATHS = new Set(["/demo/session-token", "/playground/session-token"]);
/** A client secret lives as long as a session token: long enough to connect, and the page asks for a new one per connection. */
const DEMO_SECRET_SECONDS = 60;

/** Returns true when the request was a demo route (and is being answered). */
export function handleDemoRoutes(res: HttpResponse, req: HttpRequest, deps: DemoDeps): boolean {
  const url = req.getUrl();
  const method = req.getMethod().toLowerCase();
  if (PAGE_PATHS.has(url) && method === "get") {
    res.writeStatus("200 OK");
    res.writeHeader("content-type", "text/html; charset=utf-8");
    res.writeHeader("cache-control", "no-store");
    res.writeHeader("content-security-policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; media-src 'self' blob:; connect-src 'self' ws: wss:");
    res.end(PLAYGROUND_HTML);
    return true;
  }
  if (TOKEN_PATHS.has(url) && method === "post") {
    const door = req.getQuery("door") === "openai" ? "openai" : "native";
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    res.onData(() => undefined); // body ignored
    issueDemoCredential(deps, door).then(
      (body) => !aborted && res.cork(() => res.writeStatus("200 OK").writeHeader("content-type", "application/json").writeHeader("cache-control", "no-store").end(JSON.stringify(body))),
      (err) => {
        const e = toAppError(err);
        if (aborted) return;
        res.cork(() =>
          res
            .writeStatus(`${e.status} ${e.status === 503 ? "Service Unavailable" : "Error"}`)
            .writeHeader("content-type", "application/json")
            .end(JSON.stringify({ error: { message: e.message, type: e.status >= 500 ? "server_error" : "invalid_request_error", code: e.code } })),
        );
      },
    );
    return true;
  }
  return false;
}

async function issueDemoCredential(deps: DemoDeps, door: "native" | "openai") {
  const key = deps.config.realtime.demoApiKey;
  if (!key) throw new AppError("unavailable", "demo_disabled", "The demo is disabled: set RT_DEMO_API_KEY to an API key for the demo to use.");
  const now = deps.now();
  const principal = await authenticateApiKey(deps.db, `Bearer ${key}`, now, deps.config.plans);
  if (door === "openai") {
    const { value, expiresAt } = issueClientSecret(deps.config.auth.sessionTokenSecret, principal, now, DEMO_SECRET_SECONDS);
    return { secret: value, expires_at: expiresAt, endpoint: OPENAI_REALTIME_PATH };
  }
  const { token, expiresIn } = issueSessionToken(deps.config.auth.sessionTokenSecret, principal, now);
  return { token, expires_in: expiresIn, endpoint: REALTIME_PATH };
}
