import { useEffect, useRef, useState } from "react";
import { Code } from "@connectrpc/connect";
import type { Session } from "./app.js";
import { isRefused, refusal } from "./api.js";
import { useLoad, VirtualTable } from "./repos.js";
import { millis, short, when } from "./format.js";
import { useTick } from "./live.js";
import { JobState, type Job, type JobStateCount } from "../../sdk/ts/src/gen/agwp/v1/job_pb.js";
import { Role } from "../../sdk/ts/src/gen/agwp/v1/admin_pb.js";
import type { AuditEvent } from "../../sdk/ts/src/gen/agwp/v1/audit_pb.js";

export function jobStateName(s: JobState): string {
  return JobState[s]?.replace("JOB_STATE_", "").toLowerCase() ?? String(s);
}

const states = [JobState.QUEUED, JobState.CLAIMED, JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED];

interface Sample {
  at: number;
  counts: Map<JobState, number>;
}

// useCounts samples the job counts as the feed moves, at most every three seconds, and keeps the
// last 200 samples: the counts over the time the page is open.
function useCounts(session: Session): { samples: Sample[]; error: string } {
  const [samples, setSamples] = useState<Sample[]>([]);
  const [error, setError] = useState("");
  const last = useRef(0);
  useEffect(() => {
    const wait = Math.max(0, last.current + 3000 - Date.now());
    const t = setTimeout(async () => {
      last.current = Date.now();
      try {
        const res = await session.api.jobs.countJobs({});
        const counts = new Map(res.counts.map((c: JobStateCount) => [c.state, Number(c.count)]));
        setSamples((s) => [...s, { at: millis(res.countedAt), counts }].slice(-200));
        setError("");
      } catch (err) {
        setError(refusal(err));
      }
    }, wait);
    return () => clearTimeout(t);
  }, [session.api, session.feed.version]);
  return { samples, error };
}

function Sparkline({ values }: { values: number[] }) {
  if (values.length < 2) return null;
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => `${(i / (values.length - 1)) * 100},${20 - (v / max) * 18}`).join(" ");
  return (
    <svg viewBox="0 0 100 20" preserveAspectRatio="none" className="spark" aria-hidden="true">
      <polyline points={pts} fill="none" stroke="currentColor" strokeWidth="1.2" vectorEffect="non-scaling-stroke" />
    </svg>
  );
}

export function JobsPage({ session }: { session: Session }) {
  const { samples, error: countError } = useCounts(session);
  const [state, setState] = useState<JobState | 0>(0);
  const [kind, setKind] = useState("");
  const [worker, setWorker] = useState("");
  const [pages, setPages] = useState(1);
  const { data, error } = useLoad(async () => {
    const jobs: Job[] = [];
    let pageToken = "";
    for (let i = 0; i < pages; i++) {
      const res = await session.api.jobs.listJobs({
        pageSize: 500, pageToken, states: state ? [state] : [], kinds: kind.trim() ? [kind.trim()] : [],
        claimedBy: worker.trim() ? (worker.includes("|") ? worker.trim() : worker.trim() + "|") : "",
      });
      jobs.push(...res.jobs);
      pageToken = res.nextPageToken;
      if (!pageToken) break;
    }
    return { jobs, more: pageToken !== "" };
  }, [state, kind, worker, pages, session.feed.version]);
  const latest = samples[samples.length - 1];
  return (
    <section>
      <h2>Jobs</h2>
      {countError && <p className="error">{countError}</p>}
      <div className="counts">
        {states.map((s) => (
          <div key={s} className="countbox" data-testid={"count-" + jobStateName(s)}>
            <span className="label">{jobStateName(s)}</span>
            <span className="value">{latest ? (latest.counts.get(s) ?? 0).toLocaleString() : "…"}</span>
            <Sparkline values={samples.map((x) => x.counts.get(s) ?? 0)} />
          </div>
        ))}
      </div>
      <div className="filters">
        <select value={state} onChange={(e) => { setState(Number(e.target.value) as JobState); setPages(1); }} data-testid="filter-state">
          <option value={0}>every state</option>
          {states.map((s) => <option key={s} value={s}>{jobStateName(s)}</option>)}
        </select>
        <input placeholder="kind" value={kind} onChange={(e) => { setKind(e.target.value); setPages(1); }} data-testid="filter-kind" />
        <input placeholder="worker (principal or principal|label)" value={worker} onChange={(e) => { setWorker(e.target.value); setPages(1); }} data-testid="filter-worker" />
      </div>
      {error && <p className="error" data-testid="error">{error}</p>}
      <VirtualTable
        rows={data?.jobs ?? []}
        testid="job-row"
        header={<tr><th>job</th><th>kind</th><th>state</th><th>claim</th><th>worker</th><th>updated</th><th>last error</th></tr>}
        render={(j: Job) => (
          <>
            <td><a href={"#/job/" + j.id} className="mono">{short(j.id)}</a></td>
            <td>{j.kind}</td>
            <td data-testid="job-state">{jobStateName(j.state)}{j.cancelRequested ? " (cancel asked)" : ""}</td>
            <td>{j.attempts} of {j.maxAttempts}</td>
            <td>{j.claimedBy || "—"}</td>
            <td>{when(j.updatedAt)}</td>
            <td>{j.lastError}</td>
          </>
        )}
      />
      {data?.more && <button onClick={() => setPages((p) => p + 1)} data-testid="more-jobs">More</button>}
    </section>
  );
}

export function JobPage({ session, id }: { session: Session; id: string }) {
  const [running, setRunning] = useState(false);
  const tick = useTick(running); // a running job's output comes with heartbeats, which record no event
  const { data, error } = useLoad(() => session.api.jobs.getJob({ jobId: id }), [id, session.feed.version, tick]);
  useEffect(() => setRunning(data?.job?.state === JobState.CLAIMED), [data]);
  const [actionError, setActionError] = useState("");
  const [history, setHistory] = useState<{ events: AuditEvent[]; note: string } | null>(null);
  const j = data?.job;
  const cancel = async () => {
    try {
      await session.api.jobs.cancelJob({ jobId: id });
      setActionError("");
    } catch (err) {
      setActionError("cancel: " + refusal(err));
    }
  };
  const again = async () => {
    if (!j) return;
    try {
      const res = await session.api.jobs.enqueueJob({ kind: j.kind, payload: j.payload, priority: j.priority, maxAttempts: j.maxAttempts });
      window.location.hash = "#/job/" + (res.job?.id ?? "");
    } catch (err) {
      setActionError("enqueue again: " + refusal(err));
    }
  };
  // Each claim and how it ended is in the audit log: the events of job/ID, read from the start.
  const searchLog = async () => {
    const events: AuditEvent[] = [];
    let after = 0n;
    setHistory({ events, note: "reading the log…" });
    try {
      for (;;) {
        const res = await session.api.audit.listAuditEvents({ afterSeq: after, pageSize: 1000 });
        if (res.events.length === 0) break;
        events.push(...res.events.filter((e) => e.subject === "job/" + id));
        after = res.events[res.events.length - 1]!.seq;
        setHistory({ events: [...events], note: `read to event ${after}` });
      }
      setHistory({ events, note: "" });
    } catch (err) {
      setHistory({ events, note: isRefused(err, Code.PermissionDenied) ? "this token may not read the audit log" : refusal(err) });
    }
  };
  const fromFeed = session.feed.events.filter((e) => e.subject === "job/" + id);
  const shown = history ? history.events : fromFeed;
  return (
    <section>
      <h2>Job <span className="mono">{id}</span></h2>
      {(error || actionError) && <p className="error" data-testid="error">{actionError || error}</p>}
      {j && (
        <>
          <dl className="facts">
            <dt>kind</dt><dd>{j.kind}</dd>
            <dt>state</dt><dd data-testid="job-state">{jobStateName(j.state)}{j.cancelRequested ? " (its worker was asked to stop)" : ""}</dd>
            <dt>claims</dt><dd>{j.attempts} of at most {j.maxAttempts}</dd>
            <dt>worker</dt><dd>{j.claimedBy || "—"}</dd>
            <dt>enqueued by</dt><dd>{j.enqueuedBy}</dd>
            <dt>last error</dt><dd>{j.lastError || "—"}</dd>
            <dt>attestation</dt><dd className="mono">{j.attestationDigest || "—"}</dd>
            <dt>created</dt><dd>{when(j.createdAt)}</dd>
            <dt>updated</dt><dd>{when(j.updatedAt)}</dd>
          </dl>
          <div className="actions">
            <button onClick={() => void cancel()} data-testid="cancel-job">Cancel</button>
            <button onClick={() => void again()} data-testid="enqueue-again">Enqueue again</button>
          </div>
          <h3>Claims <span className="count">from the audit log</span></h3>
          <table>
            <thead><tr><th>seq</th><th>time</th><th>event</th><th>by</th><th>claim</th><th>error</th></tr></thead>
            <tbody>
              {shown.map((e) => {
                const d = e.details as Record<string, unknown> | undefined;
                return (
                  <tr key={e.seq.toString()} data-testid="claim-row">
                    <td className="mono">{e.seq.toString()}</td>
                    <td>{when(e.time)}</td>
                    <td>{e.action}</td>
                    <td>{e.holder || e.principal}</td>
                    <td>{String(d?.claim ?? d?.attempt ?? "")}</td>
                    <td>{String(d?.error ?? d?.reason ?? "")}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          <p className="hint">
            {history ? history.note || `${shown.length} events of this job in the whole log.` : "Events seen since the page opened. "}
            {!history && <button onClick={() => void searchLog()} data-testid="search-log">Search the whole log</button>}
          </p>
          {(j.output || j.progress) && (
            <>
              <h3>Output {j.state === JobState.CLAIMED && j.progress && <span className="count">{j.progress}</span>}</h3>
              <pre className="log" data-testid="job-output">{j.output}</pre>
            </>
          )}
        </>
      )}
    </section>
  );
}

export function WorkersPage({ session }: { session: Session }) {
  const { data, error } = useLoad(async () => {
    // Who claimed recently, and when each label was last busy.
    const recent = await session.api.jobs.listJobs({ pageSize: 1000 });
    const seen = new Map<string, { label: string; principal: string; last: number; jobs: number }>();
    for (const j of recent.jobs) {
      if (!j.claimedBy) continue;
      const [principal = "", label = ""] = j.claimedBy.split("|");
      const w = seen.get(j.claimedBy) ?? { principal, label, last: 0, jobs: 0 };
      w.last = Math.max(w.last, millis(j.updatedAt));
      w.jobs++;
      seen.set(j.claimedBy, w);
    }
    let principals: string[];
    try {
      const res = await session.api.admin.listPrincipals({ pageSize: 1000 });
      principals = res.principals.filter((p) => p.role === Role.WORKER && !p.disabled).map((p) => p.name);
    } catch (err) {
      if (!isRefused(err, Code.PermissionDenied)) throw err;
      principals = [...new Set([...seen.values()].map((w) => w.principal))];
    }
    const keys = new Map<string, string[]>();
    for (const p of principals) {
      try {
        const res = await session.api.admin.listWorkerKeys({ principal: p });
        keys.set(p, res.keys.map((k) => k.keyId));
      } catch {
        keys.set(p, []);
      }
    }
    return { principals, seen: [...seen.values()].sort((a, b) => b.last - a.last), keys };
  }, [session.feed.version]);
  return (
    <section>
      <h2>Workers</h2>
      {error && <p className="error">{error}</p>}
      <table>
        <thead><tr><th>principal</th><th>label</th><th>last activity</th><th>recent jobs</th><th>keys</th></tr></thead>
        <tbody>
          {data?.principals.flatMap((p) => {
            const labels = data.seen.filter((w) => w.principal === p);
            const rows = labels.length > 0 ? labels : [{ principal: p, label: "", last: 0, jobs: 0 }];
            return rows.map((w) => (
              <tr key={p + "|" + w.label} data-testid="worker-row">
                <td>{p}</td>
                <td>{w.label || "—"}</td>
                <td>{w.last ? new Date(w.last).toISOString() : "no recent claim"}</td>
                <td>{w.jobs}</td>
                <td className="mono">{(data.keys.get(p) ?? []).map((k) => short(k, 20)).join(", ") || "none registered"}</td>
              </tr>
            ));
          })}
        </tbody>
      </table>
    </section>
  );
}
