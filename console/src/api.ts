// The console speaks AGWP v1 over Connect, with the SDK's generated descriptors, from the page's
// own origin. The token is kept in sessionStorage: for this tab only, gone when it closes.
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService } from "../../sdk/ts/src/gen/agwp/v1/admin_pb.js";
import { AuditService } from "../../sdk/ts/src/gen/agwp/v1/audit_pb.js";
import { JobService } from "../../sdk/ts/src/gen/agwp/v1/job_pb.js";
import { LeaseService } from "../../sdk/ts/src/gen/agwp/v1/lease_pb.js";
import { RepositoryService } from "../../sdk/ts/src/gen/agwp/v1/repository_pb.js";
import { TaskService } from "../../sdk/ts/src/gen/agwp/v1/task_pb.js";

const tokenKey = "ag.console.token";

export function savedToken(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

export function saveToken(token: string): void {
  if (token) {
    sessionStorage.setItem(tokenKey, token);
  } else {
    sessionStorage.removeItem(tokenKey);
  }
}

export interface Api {
  admin: Client<typeof AdminService>;
  audit: Client<typeof AuditService>;
  jobs: Client<typeof JobService>;
  leases: Client<typeof LeaseService>;
  repos: Client<typeof RepositoryService>;
  tasks: Client<typeof TaskService>;
}

export function newApi(token: string): Api {
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("Authorization", "Bearer " + token);
    return next(req);
  };
  const transport = createConnectTransport({ baseUrl: window.location.origin, interceptors: [bearer] });
  return {
    admin: createClient(AdminService, transport),
    audit: createClient(AuditService, transport),
    jobs: createClient(JobService, transport),
    leases: createClient(LeaseService, transport),
    repos: createClient(RepositoryService, transport),
    tasks: createClient(TaskService, transport),
  };
}

// refusal answers what the server said, as a person should read it: its own message, and the
// code when that is all there is.
export function refusal(err: unknown): string {
  if (err instanceof ConnectError) {
    const what = err.rawMessage || Code[err.code];
    return err.code === Code.PermissionDenied || err.code === Code.Unauthenticated
      ? `${Code[err.code].replace(/([A-Z])/g, " $1").trim().toLowerCase()}: ${what}`
      : what;
  }
  return err instanceof Error ? err.message : String(err);
}

export function isRefused(err: unknown, code: Code): boolean {
  return err instanceof ConnectError && err.code === code;
}
