import { useMemo, useState, type ChangeEvent } from "react";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Session } from "./app.js";
import { refusal } from "./api.js";
import { VirtualTable } from "./repos.js";
import { parseExport, parseVerifierKey, verifyEvents, type RawEvent, type Verdict } from "./verify.js";
import type { AuditEvent } from "../../sdk/ts/src/gen/agwp/v1/audit_pb.js";

const pinKey = "ag.console.audit-key";

export function AuditPage({ session }: { session: Session }) {
  const [key, setKey] = useState(localStorage.getItem(pinKey) ?? "");
  const [pinned, setPinned] = useState(localStorage.getItem(pinKey) ?? "");
  const [verdict, setVerdict] = useState<{ what: string; v: Verdict } | null>(null);
  const [progress, setProgress] = useState("");
  const [actor, setActor] = useState("");
  const [subject, setSubject] = useState("");

  const keyError = useMemo(() => {
    if (!key.trim()) return "";
    try {
      parseVerifierKey(key);
      return "";
    } catch (err) {
      return (err as Error).message;
    }
  }, [key]);

  const pin = () => {
    localStorage.setItem(pinKey, key.trim());
    setPinned(key.trim());
  };

  const verifyServer = async () => {
    setVerdict(null);
    try {
      const k = parseVerifierKey(key);
      const cp = await session.api.audit.getCheckpoint({});
      const events: RawEvent[] = [];
      let after = 0n;
      while (BigInt(events.length) < cp.size) {
        const res = await session.api.audit.listAuditEvents({ afterSeq: after, pageSize: 1000 });
        if (res.events.length === 0) break;
        for (const e of res.events) {
          if (e.seq > cp.size) break;
          events.push(fromProto(e));
        }
        after = res.events[res.events.length - 1]!.seq;
        setProgress(`read ${events.length} of ${cp.size} events`);
      }
      setVerdict({ what: "the server's log", v: verifyEvents(events, cp.note, k) });
    } catch (err) {
      setVerdict({ what: "the server's log", v: { ok: false, size: 0, events: 0, reason: refusal(err) } });
    } finally {
      setProgress("");
    }
  };

  const verifyFile = async (e: ChangeEvent<HTMLInputElement>) => {
    const file = e.target.files?.[0];
    e.target.value = "";
    if (!file) return;
    setVerdict(null);
    try {
      const k = parseVerifierKey(key);
      const { events, note } = parseExport(await file.text());
      setVerdict({ what: file.name, v: verifyEvents(events, note, k) });
    } catch (err) {
      setVerdict({ what: file.name, v: { ok: false, size: 0, events: 0, reason: (err as Error).message } });
    }
  };

  const shown = session.feed.events
    .filter((e) => !actor || e.principal.includes(actor) || e.holder.includes(actor))
    .filter((e) => !subject || e.subject.includes(subject))
    .slice()
    .reverse();

  return (
    <section>
      <h2>Audit log</h2>
      <h3>Verify, with the key you hold</h3>
      <p className="hint">
        Paste the audit log's verifier key (the <span className="mono">FILE.pub</span> next to the server's
        <span className="mono"> --audit-key</span>, from whoever runs it, not from this page's server). The checkpoint's
        signature, every event's hash and the Merkle root are checked here, in the browser.
      </p>
      <textarea data-testid="audit-key" rows={2} value={key} onChange={(e) => setKey(e.target.value)} placeholder="ag+1a2b3c4d+AQ..." />
      {keyError && <p className="error" data-testid="key-error">{keyError}</p>}
      <div className="actions">
        <button onClick={pin} disabled={!key.trim() || !!keyError || key.trim() === pinned} data-testid="pin-key">
          {key.trim() && key.trim() === pinned ? "Pinned in this browser" : "Pin in this browser"}
        </button>
        <button onClick={() => void verifyServer()} disabled={!key.trim() || !!keyError} data-testid="verify-server">
          Verify the server's log
        </button>
        <label className="file">
          Verify an export (<span className="mono">ag audit export</span>)
          <input type="file" data-testid="export-file" onChange={(e) => void verifyFile(e)} disabled={!key.trim() || !!keyError} />
        </label>
      </div>
      {progress && <p className="hint">{progress}</p>}
      {verdict && (
        <p className={verdict.v.ok ? "verdict ok" : "verdict bad"} data-testid="verify-result">
          {verdict.v.ok
            ? `${verdict.what}: verified. The checkpoint of ${verdict.v.size} events (origin ${verdict.v.origin}) is signed by the key, and every event up to it hashes to it.`
            : `${verdict.what}: does not verify. ${verdict.v.reason}`}
        </p>
      )}
      <h3>
        As it grows <span className="count">{session.feed.live ? "live" : "not readable with this token"}</span>
      </h3>
      <div className="filters">
        <input placeholder="actor (principal or holder)" value={actor} onChange={(e) => setActor(e.target.value)} data-testid="filter-actor" />
        <input placeholder="subject (job/, lease/, change/...)" value={subject} onChange={(e) => setSubject(e.target.value)} data-testid="filter-subject" />
      </div>
      <VirtualTable
        rows={shown}
        testid="audit-row"
        header={<tr><th>seq</th><th>time</th><th>actor</th><th>action</th><th>subject</th><th>details</th></tr>}
        render={(e: AuditEvent) => (
          <>
            <td className="mono">{e.seq.toString()}</td>
            <td>{e.time ? timestampDate(e.time).toISOString() : ""}</td>
            <td>{e.holder || e.principal}</td>
            <td>{e.action}</td>
            <td className="mono">{e.subject}</td>
            <td className="mono">{e.detailsJson}</td>
          </>
        )}
      />
    </section>
  );
}

function fromProto(e: AuditEvent): RawEvent {
  const t = e.time!;
  const base = new Date(Number(t.seconds) * 1000).toISOString().slice(0, 19);
  const micros = String(Math.floor(t.nanos / 1000)).padStart(6, "0");
  return {
    seq: Number(e.seq), time: `${base}.${micros}Z`, principal: e.principal, holder: e.holder, action: e.action,
    subject: e.subject, details: e.detailsJson, prevHash: e.prevHash, hash: e.hash,
  };
}
