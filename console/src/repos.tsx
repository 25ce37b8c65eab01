import { useEffect, useRef, useState } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { Session } from "./app.js";
import { refusal } from "./api.js";
import { useNow } from "./live.js";
import { firstLine, left, millis, short, when } from "./format.js";
import { tasksHref } from "./tasks.js";
import type { Lease } from "../../sdk/ts/src/gen/agwp/v1/lease_pb.js";
import {
  CandidateState,
  ChangeState,
  MirrorState,
  type Change,
  type Mirror,
  type GetQueueResponse,
  type Repository,
} from "../../sdk/ts/src/gen/agwp/v1/repository_pb.js";

// useLoad runs load whenever deps or the live feed move, and keeps the last answer or error.
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data?: T; error: string } {
  const [state, setState] = useState<{ data?: T; error: string }>({ error: "" });
  useEffect(() => {
    let current = true;
    load().then(
      (data) => current && setState({ data, error: "" }),
      (err) => current && setState((s) => ({ ...s, error: refusal(err) })),
    );
    return () => {
      current = false;
    };
    // load is a new closure every render: deps say when it must run again.
  }, deps);
  return state;
}

export function RepositoryList({ session }: { session: Session }) {
  const { data, error } = useLoad(() => session.api.repos.listRepositories({ pageSize: 1000 }), [session.feed.version]);
  return (
    <section>
      <h2>Repositories</h2>
      {error && <p className="error" data-testid="error">{error}</p>}
      <table>
        <thead>
          <tr><th>name</th><th>mainline</th><th>validation</th><th>created</th><th></th></tr>
        </thead>
        <tbody>
          {data?.repositories.map((r: Repository) => (
            <tr key={r.name} data-testid="repository-row">
              <td><a href={"#/repo/" + encodeURIComponent(r.name)}>{r.name}</a></td>
              <td className="mono">{short(r.mainline)}</td>
              <td className="mono">{r.validation ? r.validation.command.join(" ") : "none"}</td>
              <td>{when(r.createdAt)}</td>
              <td><a href={tasksHref(r.name)}>tasks</a></td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

export function RepositoryPage({ session, name }: { session: Session; name: string }) {
  const { data, error } = useLoad(() => session.api.repos.getRepository({ name }), [name, session.feed.version]);
  const r = data?.repository;
  return (
    <section>
      <h2>Repository {name}</h2>
      {error && <p className="error" data-testid="error">{error}</p>}
      <p><a href={tasksHref(name)} data-testid="repo-tasks">Tasks</a>: ready, claimed, waiting and done.</p>
      {r && (
        <dl className="facts">
          <dt>mainline</dt><dd className="mono">{r.mainline}</dd>
          <dt>commit</dt><dd className="mono">{r.mainlineCommit || "—"}</dd>
          <dt>validation</dt>
          <dd className="mono">{r.validation ? r.validation.command.join(" ") : "none: changes integrate at once"}
            {r.validation?.lanes.map((l) => (
              <span key={l.name} className="lane">lane {l.name}: {l.prefixes.join(", ")} → {l.command.join(" ")}</span>
            ))}
          </dd>
          {r.mirror && (
            <>
              <dt>forge mirror</dt>
              <dd data-testid="mirror">{mirrorLine(r.mirror)}</dd>
            </>
          )}
        </dl>
      )}
      <Leases session={session} repository={name} />
      <Queue session={session} repository={name} />
      <Changes session={session} repository={name} />
    </section>
  );
}

// mirrorLine says where the forge mirror stands, as `ag repo show` does: a diverged or failing
// mirror with its reason, which is the forge's text, shown as text.
function mirrorLine(m: Mirror): string {
  const at = `${m.url} (${m.branch})`;
  switch (m.state) {
    case MirrorState.CURRENT:
      return `${at}: current at ${short(m.pushedCommit)}`;
    case MirrorState.DIVERGED:
      return `${at}: diverged — ${m.lastError}`;
    case MirrorState.FAILING:
      return `${at}: failing — ${m.lastError}`;
    default:
      return `${at}: pending`;
  }
}

function Leases({ session, repository }: { session: Session; repository: string }) {
  const now = useNow();
  const [expiredTick, setExpiredTick] = useState(0);
  const [actionError, setActionError] = useState("");
  const { data, error } = useLoad(async () => {
    const leases: Lease[] = [];
    let pageToken = "";
    do {
      const res = await session.api.leases.listLeases({ repository, pageSize: 1000, pageToken });
      leases.push(...res.leases);
      pageToken = res.nextPageToken;
    } while (pageToken && leases.length < 5000);
    return leases;
  }, [repository, session.feed.version, expiredTick]);
  // A lease that expires records no event: the list is read again when the next one ends.
  const next = Math.min(...(data ?? []).map((l) => millis(l.expiresAt)).filter((t) => t > now));
  useEffect(() => {
    if (!Number.isFinite(next)) return;
    const t = setTimeout(() => setExpiredTick((n) => n + 1), Math.max(next - Date.now(), 0) + 250);
    return () => clearTimeout(t);
  }, [next]);
  const breakLease = async (l: Lease) => {
    try {
      await session.api.leases.breakLease({ leaseId: l.id });
      setActionError("");
    } catch (err) {
      setActionError(`break ${l.id}: ${refusal(err)}`);
    }
  };
  const leases = data ?? [];
  return (
    <section>
      <h3>Leases <span className="count" data-testid="lease-count">{leases.length}</span></h3>
      {(error || actionError) && <p className="error" data-testid="error">{actionError || error}</p>}
      <VirtualTable
        rows={leases}
        header={<tr><th>paths</th><th>holder</th><th>token</th><th>time left</th><th></th></tr>}
        testid="lease-row"
        render={(l) => {
          const ends = millis(l.expiresAt);
          return (
            <>
              <td className="mono">{l.paths.join(", ")}</td>
              <td>{l.holder}</td>
              <td className="mono" data-testid="lease-token">{l.fencingToken.toString()}</td>
              <td data-testid="lease-left" className={ends <= now ? "expired" : ""}>{left(ends, now)}</td>
              <td><button onClick={() => void breakLease(l)} data-testid="break-lease">Break</button></td>
            </>
          );
        }}
      />
    </section>
  );
}

function Queue({ session, repository }: { session: Session; repository: string }) {
  const { data, error } = useLoad<GetQueueResponse>(() => session.api.repos.getQueue({ repository }), [repository, session.feed.version]);
  if (error) return <p className="error">{error}</p>;
  if (!data || (data.candidates.length === 0 && data.waiting.length === 0)) {
    return (
      <section>
        <h3>Queue</h3>
        <p className="empty" data-testid="queue-empty">Nothing waits to land.</p>
      </section>
    );
  }
  return (
    <section>
      <h3>Queue <span className="count">depth {data.depth}, batch {data.batch}</span></h3>
      <table>
        <thead>
          <tr><th>candidate</th><th>state</th><th>lane</th><th>changes</th><th>workers</th><th>progress</th></tr>
        </thead>
        <tbody>
          {data.candidates.map((c) => (
            <tr key={c.id} data-testid="candidate-row">
              <td className="mono">{short(c.id)}</td>
              <td>{CandidateState[c.state]?.replace("CANDIDATE_STATE_", "").toLowerCase()}</td>
              <td>{c.lane || "whole tree"}</td>
              <td>{c.changes.map((id) => <a key={id} href={"#/change/" + id} className="mono">{short(id)} </a>)}</td>
              <td>{c.workers.join(", ") || "—"}</td>
              <td className="mono">{c.progress}</td>
            </tr>
          ))}
          {data.waiting.map((c) => (
            <tr key={c.id} data-testid="waiting-row">
              <td>—</td><td>queued</td><td></td>
              <td><a href={"#/change/" + c.id} className="mono">{short(c.id)}</a></td><td></td><td>{firstLine(c.message)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function Changes({ session, repository }: { session: Session; repository: string }) {
  const { data, error } = useLoad(async () => {
    const res = await session.api.repos.listChanges({ repository, pageSize: 1000 });
    return res.changes;
  }, [repository, session.feed.version]);
  return (
    <section>
      <h3>Changes <span className="count">newest first</span></h3>
      {error && <p className="error">{error}</p>}
      <VirtualTable
        rows={data ?? []}
        header={<tr><th>change</th><th>state</th><th>author</th><th>message</th><th>attestation</th><th>validation</th></tr>}
        testid="change-row"
        render={(c: Change) => (
          <>
            <td><a href={"#/change/" + c.id} className="mono">{short(c.id)}</a></td>
            <td data-testid="change-state">{changeStateName(c.state)}</td>
            <td>{c.author}</td>
            <td>{firstLine(c.message)}</td>
            <td className="mono">{c.attestationDigest ? short(c.attestationDigest, 16) : "—"}</td>
            <td data-testid="change-validation">{validationResult(c)}</td>
          </>
        )}
      />
    </section>
  );
}

// validationResult says what the attestation behind a change says: the gate lands a change only
// on a passing one, and rejects one on a failing one.
function validationResult(c: Change): string {
  if (!c.attestationDigest) return c.state === ChangeState.INTEGRATED ? "not validated" : "—";
  return c.state === ChangeState.INTEGRATED ? "passed" : c.state === ChangeState.REJECTED ? "failed" : "—";
}

export function changeStateName(s: ChangeState): string {
  return ChangeState[s]?.replace("CHANGE_STATE_", "").toLowerCase().replaceAll("_", " ") ?? String(s);
}

// VirtualTable renders only the rows in view, so that thousands of leases or changes scroll
// without freezing the page.
export function VirtualTable<T>({ rows, header, render, testid }: {
  rows: T[];
  header: React.ReactNode;
  render: (row: T) => React.ReactNode;
  testid: string;
}) {
  const parent = useRef<HTMLDivElement>(null);
  const rowHeight = 38; // a row with a button; rows are measured as they render
  const v = useVirtualizer({ count: rows.length, getScrollElement: () => parent.current, estimateSize: () => rowHeight, overscan: 10 });
  const items = v.getVirtualItems();
  const top = items[0]?.start ?? 0;
  const bottom = v.getTotalSize() - (items[items.length - 1]?.end ?? 0);
  return (
    <div ref={parent} className="scroll" style={{ maxHeight: Math.min(rows.length * rowHeight + 44, 520) }}>
      <table>
        <thead>{header}</thead>
        <tbody>
          {top > 0 && <tr style={{ height: top }} />}
          {items.map((it) => (
            <tr key={it.key} data-testid={testid} data-index={it.index} ref={v.measureElement}>{render(rows[it.index]!)}</tr>
          ))}
          {bottom > 0 && <tr style={{ height: bottom }} />}
        </tbody>
      </table>
      {rows.length === 0 && <p className="empty">None.</p>}
    </div>
  );
}
