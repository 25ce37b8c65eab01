import type { Session } from "./app.js";
import { useLoad, changeStateName } from "./repos.js";
import { when, short } from "./format.js";
import { useTick } from "./live.js";
import { useState } from "react";
import { refusal } from "./api.js";
import { JobState } from "../../sdk/ts/src/gen/agwp/v1/job_pb.js";
import { unifiedDiff, type Hunk } from "./diff.js";
import type { Change } from "../../sdk/ts/src/gen/agwp/v1/repository_pb.js";
import { CandidateState, ChangeState, type Candidate } from "../../sdk/ts/src/gen/agwp/v1/repository_pb.js";
import { taskHref, Thread } from "./tasks.js";

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
            {c.taskId && (
              <>
                <dt>task claim</dt>
                <dd><a href={taskHref(c.taskId)} className="mono" data-testid="change-task">{c.taskId}#{c.taskClaimNumber.toString()}</a></dd>
              </>
            )}
            <dt>candidate</dt><dd className="mono">{c.candidateRevision || "—"}</dd>
            <dt>integrated</dt><dd className="mono">{c.integratedRevision || "—"}</dd>
            <dt>attestation</dt><dd className="mono" data-testid="change-attestation">{c.attestationDigest || "—"}</dd>
            {c.protectedPaths.length > 0 && (
              <>
                <dt>protected</dt><dd className="mono" data-testid="change-protected">{c.protectedPaths.join(", ")}</dd>
              </>
            )}
            {(c.approvedBy || c.protectedPaths.length > 0) && (
              <>
                <dt>approved by</dt>
                <dd data-testid="change-approved-by">{c.approvedBy ? `${c.approvedBy}, ${when(c.approvedAt)}` : "nobody yet: a reviewer approves it"}</dd>
              </>
            )}
            <dt>updated</dt><dd>{when(c.updatedAt)}</dd>
            {c.candidate && (
              <>
                <dt>in candidate</dt>
                <dd>{describe(c.candidate)}</dd>
              </>
            )}
          </dl>
          {/* A batch's job was enqueued for its last change: cancelling it cancels that one only. */}
          {c.state === ChangeState.VALIDATING && c.jobId && c.candidate?.changes.at(-1) === c.id && (
            <CancelChange session={session} jobId={c.jobId} />
          )}
          {/* A change to protected paths lands only once a reviewer or an admin approves it; the
              server refuses anyone else. */}
          {!c.approvedBy && c.protectedPaths.length > 0 &&
            (c.state === ChangeState.QUEUED || c.state === ChangeState.VALIDATING || c.state === ChangeState.AWAITING_APPROVAL) && (
            <ApproveChange session={session} changeId={c.id} />
          )}
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
                  <li key={h.id} className="prewrap"><span className="mono">{short(h.id)}</span> {describe(h)}{h.reason ? `: ${h.reason}` : ""}</li>
                ))}
              </ul>
            </>
          )}
          <Edits session={session} change={c} />
          {job.data && (
            <>
              <h3>Validation output {job.data.state === JobState.CLAIMED && job.data.progress && <span className="count">{job.data.progress}</span>}</h3>
              <pre className="log" data-testid="job-output">{job.data.output || "(nothing yet)"}</pre>
            </>
          )}
          <Thread session={session} repository={c.repository} changeId={c.id} />
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

interface FileDiff {
  path: string;
  what: string; // "added", "deleted", "changed"
  hunks?: Hunk[];
  note?: string; // why no lines are shown
}

const maxDiffBytes = 256 << 10;

// Edits shows the change's edits as a diff against its base, on demand: reading two trees of a
// large repository is not free.
function Edits({ session, change }: { session: Session; change: Change }) {
  const [files, setFiles] = useState<FileDiff[] | null>(null);
  const [error, setError] = useState("");
  const after = change.integratedRevision || change.candidateRevision;
  const load = async () => {
    setError("");
    try {
      const [before, now] = await Promise.all([
        session.api.repos.getTree({ repository: change.repository, revision: change.baseRevision }),
        session.api.repos.getTree({ repository: change.repository, revision: after }),
      ]);
      const was = new Map(before.entries.map((e) => [e.path, e]));
      const is = new Map(now.entries.map((e) => [e.path, e]));
      const text = async (digest: string, size: bigint): Promise<string | null> => {
        if (size > BigInt(maxDiffBytes)) return null;
        const blob = await session.api.repos.getBlob({ digest });
        try {
          return new TextDecoder("utf-8", { fatal: true }).decode(blob.content);
        } catch {
          return null;
        }
      };
      const out: FileDiff[] = [];
      for (const path of change.paths) {
        const a = was.get(path);
        const b = is.get(path);
        if (a?.digest === b?.digest) continue;
        const what = !a ? "added" : !b ? "deleted" : "changed";
        const [ta, tb] = await Promise.all([a ? text(a.digest, a.size) : "", b ? text(b.digest, b.size) : ""]);
        if (ta === null || tb === null) out.push({ path, what, note: "binary, or larger than 256 KiB" });
        else out.push({ path, what, hunks: unifiedDiff(ta, tb) });
      }
      setFiles(out);
    } catch (err) {
      setError(refusal(err));
    }
  };
  if (!after || change.paths.length === 0) return null;
  return (
    <>
      <h3>Edits <span className="count">{change.paths.length === 1 ? "1 path" : `${change.paths.length} paths`}, against its base {short(change.baseRevision)}</span></h3>
      {error && <p className="error">{error}</p>}
      {!files ? (
        <button onClick={() => void load()} data-testid="show-diff">Show the diff</button>
      ) : (
        files.map((f) => (
          <div key={f.path} className="diff" data-testid="diff-file">
            <div className="diffhead mono">{f.path} <span className="count">{f.what}</span></div>
            {f.note ? <p className="hint">{f.note}</p> : (
              <pre className="difflines">
                {f.hunks!.map((h, i) => (
                  <span key={i}>
                    <span className="hunk">{h.header}{"\n"}</span>
                    {h.lines.map((l, j) => (
                      <span key={j} className={l.kind === "+" ? "add" : l.kind === "-" ? "del" : ""}>{l.kind}{l.text}{"\n"}</span>
                    ))}
                  </span>
                ))}
              </pre>
            )}
          </div>
        ))
      )}
    </>
  );
}

// CancelChange cancels a validating change through its validate job, which its author or an
// admin may cancel; the server decides, and the page shows its refusal.
function ApproveChange({ session, changeId }: { session: Session; changeId: string }) {
  const [error, setError] = useState("");
  const approve = async () => {
    try {
      await session.api.repos.approveChange({ changeId });
      setError("");
    } catch (err) {
      setError("approve: " + refusal(err));
    }
  };
  return (
    <div className="actions">
      <button onClick={() => void approve()} data-testid="approve-change">Approve this change</button>
      {error && <span className="error" data-testid="error">{error}</span>}
    </div>
  );
}

function CancelChange({ session, jobId }: { session: Session; jobId: string }) {
  const [error, setError] = useState("");
  const cancel = async () => {
    try {
      await session.api.jobs.cancelJob({ jobId });
      setError("");
    } catch (err) {
      setError("cancel: " + refusal(err));
    }
  };
  return (
    <div className="actions">
      <button onClick={() => void cancel()} data-testid="cancel-change">Cancel this change</button>
      {error && <span className="error" data-testid="error">{error}</span>}
    </div>
  );
}
