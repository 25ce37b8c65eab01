import { useCallback, useEffect, useMemo, useState, type FormEvent, type ReactNode } from "react";
import { newApi, refusal, saveToken, savedToken, type Api } from "./api.js";
import { useFeed, type Feed } from "./live.js";
import { RepositoryList, RepositoryPage } from "./repos.js";
import { ChangePage } from "./change.js";
import { AuditPage } from "./audit.js";
import { JobPage, JobsPage, WorkersPage } from "./jobs.js";
import { TaskPage, TasksIndex, TasksPage, tasksHref } from "./tasks.js";
import { Role, type Principal } from "../../sdk/ts/src/gen/agwp/v1/admin_pb.js";

export interface Session {
  api: Api;
  principal: Principal;
  feed: Feed;
}

export function App() {
  const [signedIn, setSignedIn] = useState<{ api: Api; principal: Principal } | null>(null);
  const [error, setError] = useState("");
  const signIn = useCallback(async (token: string) => {
    const api = newApi(token);
    try {
      const res = await api.admin.whoAmI({});
      if (!res.principal) throw new Error("the server answered no principal");
      saveToken(token);
      setSignedIn({ api, principal: res.principal });
      setError("");
    } catch (err) {
      saveToken("");
      setError(refusal(err));
    }
  }, []);
  useEffect(() => {
    const token = savedToken();
    if (token) void signIn(token);
  }, [signIn]);
  if (!signedIn) return <SignIn onSubmit={signIn} error={error} />;
  return (
    <Console
      api={signedIn.api}
      principal={signedIn.principal}
      onSignOut={() => {
        saveToken("");
        setSignedIn(null);
      }}
    />
  );
}

function SignIn({ onSubmit, error }: { onSubmit: (token: string) => void; error: string }) {
  const [token, setToken] = useState("");
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (token.trim()) onSubmit(token.trim());
  };
  return (
    <main className="signin">
      <h1>ag</h1>
      <form onSubmit={submit}>
        <label htmlFor="token">Token</label>
        <input id="token" data-testid="token" type="password" autoComplete="off" value={token}
          onChange={(e) => setToken(e.target.value)} placeholder="agt_..." />
        <button type="submit" data-testid="sign-in">Sign in</button>
        <p className="hint">The token stays in this tab only: closing the tab forgets it.</p>
        {error && <p className="error" data-testid="error">{error}</p>}
      </form>
    </main>
  );
}

function useRoute(): string[] {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const on = () => setHash(window.location.hash);
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
}

function Console({ api, principal, onSignOut }: { api: Api; principal: Principal; onSignOut: () => void }) {
  const feed = useFeed(api);
  const session = useMemo(() => ({ api, principal, feed }), [api, principal, feed]);
  const route = useRoute();
  let page: ReactNode;
  // Tasks are a repository's: the nav's Tasks goes to those of the repository in view, if any.
  const repoInView = (route[0] === "repo" || route[0] === "tasks") && route[1] ? route[1] : "";
  switch (route[0]) {
    case "repo":
      page = <RepositoryPage session={session} name={route[1] ?? ""} />;
      break;
    case "change":
      page = <ChangePage session={session} id={route[1] ?? ""} />;
      break;
    case "tasks":
      page = route[1] ? <TasksPage session={session} repository={route[1]} /> : <TasksIndex session={session} />;
      break;
    case "task":
      page = <TaskPage session={session} id={route[1] ?? ""} />;
      break;
    case "audit":
      page = <AuditPage session={session} />;
      break;
    case "jobs":
      page = <JobsPage session={session} />;
      break;
    case "job":
      page = <JobPage session={session} id={route[1] ?? ""} />;
      break;
    case "workers":
      page = <WorkersPage session={session} />;
      break;
    default:
      page = <RepositoryList session={session} />;
  }
  return (
    <>
      <header>
        <a href="#/" className="brand">ag</a>
        <nav>
          <a href="#/">Repositories</a>
          <a href={repoInView ? tasksHref(repoInView) : "#/tasks"} data-testid="nav-tasks">Tasks</a>
          <a href="#/jobs">Jobs</a>
          <a href="#/workers">Workers</a>
          <a href="#/audit">Audit</a>
        </nav>
        <span className="who" data-testid="who">
          {principal.name} · {roleName(principal.role)}{" "}
          <span className={feed.live ? "live on" : "live"} title={feed.live ? "following the audit log" : "polling"}>
            {feed.live ? "live" : "polling"}
          </span>
        </span>
        <button onClick={onSignOut} data-testid="sign-out">Sign out</button>
      </header>
      <main>{page}</main>
    </>
  );
}

export function roleName(r: Role): string {
  return Role[r]?.replace("ROLE_", "").toLowerCase() ?? String(r);
}
