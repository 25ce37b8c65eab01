import type { Session } from "./app.js";
import { useLoad, changeStateName } from "./repos.js";
import { when, short } from "./format.js";
import { useTick } from "./live.js";
import { CandidateState, ChangeState, type Candidate } from "../../sdk/ts/src/gen/agwp/v1/repository_pb.js";

export function ChangePage({ session, id }: { session: Session; id: string }) {
  const { data, error } = useLoad(() => session.api.repos.getChange({ changeId: id }), [id, session.feed.version]);
  const c = data?.change;
  // The validate job's output: the worker sends the log's tail with its heartbeats, which record
  // no event, so it is read every second while the change validates, and again as the feed moves.
  const tick = useTick(c?.state === ChangeState.VALIDATING);
  const job = useLoad(
    async () => (c?.jobId ? (await session.api.jobs.getJob({ jobId: c.jobId })).job : undefined),
    [c?.jobId, session.feed.version, tick],
  );
  return (
    <section>
      <h2>Change <span className="mono">{id}</span></h2>
      {error && <p className="error" data-testid="error">{error}</p>}
      {c && (
        <>
          <dl className="facts">
            <dt>repository</dt><dd><a href={"#/repo/" + encodeURIComponent(c.repository)}>{c.repository}</a></dd>
            <dt>state</dt><dd data-testid="change-state">{changeStateName(c.state)}</dd>
            <dt>author</dt><dd>{c.author}</dd>
            <dt>message</dt><dd>{c.message}</dd>
            <dt>paths</dt><dd className="mono">{c.paths.join(", ")}</dd>
            <dt>candidate</dt><dd className="mono">{c.candidateRevision || "—"}</dd>
            <dt>integrated</dt><dd className="mono">{c.integratedRevision || "—"}</dd>
            <dt>attestation</dt><dd className="mono" data-testid="change-attestation">{c.attestationDigest || "—"}</dd>
            <dt>updated</dt><dd>{when(c.updatedAt)}</dd>
            {c.candidate && (
              <>
                <dt>in candidate</dt>
                <dd>{describe(c.candidate)}</dd>
              </>
            )}
          </dl>
          {c.reason && (
            <>
              <h3>Why it was {changeStateName(c.state)}</h3>
              <pre className="log" data-testid="change-reason">{c.reason}</pre>
            </>
          )}
          {c.history.length > 0 && (
            <>
              <h3>Validated {c.history.length === 1 ? "once" : `${c.history.length} times`}</h3>
              <ul>
                {c.history.map((h) => (
                  <li key={h.id}><span className="mono">{short(h.id)}</span> {describe(h)}{h.reason ? `: ${h.reason}` : ""}</li>
                ))}
              </ul>
            </>
          )}
          {job.data && (
            <>
              <h3>Validation output {job.data.progress && <span className="count">{job.data.progress}</span>}</h3>
              <pre className="log" data-testid="job-output">{job.data.output || "(nothing yet)"}</pre>
            </>
          )}
        </>
      )}
    </section>
  );
}

function describe(c: Candidate): string {
  const parts = [CandidateState[c.state]?.replace("CANDIDATE_STATE_", "").toLowerCase() ?? ""];
  if (c.lane) parts.push("lane " + c.lane);
  if (c.changes.length > 1) parts.push(`a batch of ${c.changes.length}`);
  if (c.workers.length > 0) parts.push("on " + c.workers.join(", "));
  return parts.join(", ");
}
