// Live updates: the console long-polls the audit log (every change of state records an event)
// and bumps a counter the views refetch on. A token that may not read the log (an agent's)
// gets a counter that ticks every two seconds instead.
import { useEffect, useState } from "react";
import { Code } from "@connectrpc/connect";
import type { Api } from "./api.js";
import { isRefused } from "./api.js";
import type { AuditEvent } from "../../sdk/ts/src/gen/agwp/v1/audit_pb.js";

export interface Feed {
  version: number; // bumped at every batch of new events
  events: AuditEvent[]; // the newest events seen, newest last (at most 500)
  live: boolean; // the audit log is followed; false: polled
}

const keep = 500;

export function useFeed(api: Api): Feed {
  const [feed, setFeed] = useState<Feed>({ version: 0, events: [], live: true });
  useEffect(() => {
    let stopped = false;
    const controller = new AbortController();
    (async () => {
      let after = 0n;
      try {
        // Start from the head: the newest checkpoint's size, then whatever follows it.
        const cp = await api.audit.getCheckpoint({}, { signal: controller.signal });
        after = cp.size > 50n ? cp.size - 50n : 0n;
      } catch (err) {
        if (isRefused(err, Code.PermissionDenied)) {
          setFeed((f) => ({ ...f, live: false }));
          while (!stopped) {
            await sleep(2000);
            setFeed((f) => ({ ...f, version: f.version + 1 }));
          }
          return;
        }
      }
      while (!stopped) {
        try {
          const res = await api.audit.listAuditEvents(
            { afterSeq: after, pageSize: 500, wait: { seconds: 25n, nanos: 0 } },
            { signal: controller.signal },
          );
          if (res.events.length > 0) {
            after = res.events[res.events.length - 1]!.seq;
            setFeed((f) => ({ version: f.version + 1, events: [...f.events, ...res.events].slice(-keep), live: true }));
          }
        } catch {
          if (stopped) return;
          await sleep(2000); // the server went away: try again, and refetch what may have moved
          setFeed((f) => ({ ...f, version: f.version + 1 }));
        }
      }
    })();
    return () => {
      stopped = true;
      controller.abort();
    };
  }, [api]);
  return feed;
}

// useNow answers the time, every second: lease countdowns run without refetching.
export function useNow(): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);
  return now;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

// useTick answers a counter that goes up every ms while active: a page follows what records no
// audit event as it changes (a running job's output).
export function useTick(active: boolean, ms = 1000): number {
  const [n, setN] = useState(0);
  useEffect(() => {
    if (!active) return;
    const t = setInterval(() => setN((x) => x + 1), ms);
    return () => clearInterval(t);
  }, [active, ms]);
  return n;
}
