// Tasks and messages (TaskService): a repository's tasks by where they stand, a task with its
// thread, and the thread of a change. Titles, bodies, labels, paths, authors and message texts
// are the agents' own words: React writes them as text, and the only links are those the console
// builds from ids (#/task/<id>, #/change/<id>).
import { useEffect, useState } from "react";
import type { Session } from "./app.js";
import { useLoad, VirtualTable } from "./repos.js";
import { useNow } from "./live.js";
import { left, millis, short, when } from "./format.js";
import { TaskState, type Message, type Task } from "../../sdk/ts/src/gen/agwp/v1/task_pb.js";

export function taskHref(id: string): string {
  return "#/task/" + encodeURIComponent(id);
}

export function tasksHref(repository: string): string {
  return "#/tasks/" + encodeURIComponent(repository);
}

export function changeHref(id: string): string {
  return "#/change/" + encodeURIComponent(id);
}

export function taskStateName(s: TaskState): string {
  return TaskState[s]?.toLowerCase() ?? String(s);
}

// useWakeAt calls wake just after the earliest of ends still to come: a claim that expires
// records no audit event, so the page reads its tasks again when one does.
function useWakeAt(ends: number[], now: number, wake: () => void): void {
  const next = Math.min(...ends.filter((t) => t > now));
  useEffect(() => {
    if (!Number.isFinite(next)) return;
    const t = setTimeout(wake, Math.max(next - Date.now(), 0) + 250);
    return () => clearTimeout(t);
    // wake is a new closure every render: next says when it must be set again.
  }, [next]);
}

const maxTasks = 5000;

async function listAllTasks(session: Session, repository: string): Promise<{ tasks: Task[]; more: boolean }> {
  const tasks: Task[] = [];
  let pageToken = "";
  do {
    const res = await session.api.tasks.listTasks({ repository, pageSize: 1000, pageToken });
    tasks.push(...res.tasks);
    pageToken = res.nextPageToken;
  } while (pageToken && tasks.length < maxTasks);
  return { tasks, more: pageToken !== "" };
}

function Labels({ labels }: { labels: string[] }) {
  if (labels.length === 0) return <span className="empty">—</span>;
  return (
    <>
      {labels.map((l) => (
        <span key={l} className="tag" data-testid="task-label">{l}</span>
      ))}
    </>
  );
}

// TaskLink names a task by its title, linked by its id; a task not in view by its id.
function TaskLink({ id, task }: { id: string; task?: Task }) {
  return (
    <a href={taskHref(id)} data-testid="task-link" title={id}>
      {task ? task.title : <span className="mono">{short(id)}</span>}
    </a>
  );
}

function Deps({ ids, byId, onlyUndone }: { ids: string[]; byId: Map<string, Task>; onlyUndone?: boolean }) {
  const shown = onlyUndone ? ids.filter((d) => byId.get(d)?.state !== TaskState.DONE) : ids;
  if (shown.length === 0) return <span className="empty">—</span>;
  return (
    <>
      {shown.map((d, i) => {
        const t = byId.get(d);
        return (
          <span key={d} className="dep" data-testid="task-dep">
            {i > 0 && ", "}
            <TaskLink id={d} task={t} />
            {t && t.state !== TaskState.DONE && <span className="depstate"> ({taskStateName(t.state)})</span>}
          </span>
        );
      })}
    </>
  );
}

export function TasksIndex({ session }: { session: Session }) {
  const { data, error } = useLoad(() => session.api.repos.listRepositories({ pageSize: 1000 }), [session.feed.version]);
  return (
    <section>
      <h2>Tasks</h2>
      <p className="hint">Each repository keeps its own tasks.</p>
      {error && <p className="error" data-testid="error">{error}</p>}
      <ul>
        {data?.repositories.map((r) => (
          <li key={r.name}><a href={tasksHref(r.name)} data-testid="tasks-of">{r.name}</a></li>
        ))}
      </ul>
    </section>
  );
}

export function TasksPage({ session, repository }: { session: Session; repository: string }) {
  const now = useNow();
  const [tick, setTick] = useState(0);
  const { data, error } = useLoad(() => listAllTasks(session, repository), [repository, session.feed.version, tick]);
  const tasks = data?.tasks ?? [];
  useWakeAt(tasks.filter((t) => t.state === TaskState.CLAIMED).map((t) => millis(t.claimExpiresAt)), now, () => setTick((n) => n + 1));
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const created = (t: Task) => millis(t.createdAt);
  const ready = tasks
    .filter((t) => t.state === TaskState.OPEN && t.ready)
    .sort((a, b) => b.priority - a.priority || created(a) - created(b));
  const claimed = tasks
    .filter((t) => t.state === TaskState.CLAIMED)
    .sort((a, b) => millis(a.claimExpiresAt) - millis(b.claimExpiresAt));
  const waiting = tasks
    .filter((t) => t.state === TaskState.OPEN && !t.ready)
    .sort((a, b) => b.priority - a.priority || created(a) - created(b));
  const done = tasks.filter((t) => t.state === TaskState.DONE).sort((a, b) => millis(b.doneAt) - millis(a.doneAt));
  const cancelled = tasks.filter((t) => t.state === TaskState.CANCELLED).sort((a, b) => millis(b.updatedAt) - millis(a.updatedAt));
  return (
    <section>
      <h2>Tasks of <a href={"#/repo/" + encodeURIComponent(repository)}>{repository}</a></h2>
      {error && <p className="error" data-testid="error">{error}</p>}
      {data?.more && <p className="hint">The newest {tasks.length} tasks only.</p>}

      <h3>Ready <span className="count" data-testid="ready-count">{ready.length}</span>
        <span className="count">open, every dependency done: highest priority, then oldest, first</span></h3>
      <VirtualTable
        rows={ready}
        header={<tr><th>priority</th><th>task</th><th>labels</th><th>depends on</th><th>created</th></tr>}
        testid="task-ready"
        render={(t) => (
          <>
            <td data-testid="task-priority">{t.priority}</td>
            <td><TaskLink id={t.id} task={t} /></td>
            <td><Labels labels={t.labels} /></td>
            <td><Deps ids={t.dependsOn} byId={byId} /></td>
            <td>{when(t.createdAt)}</td>
          </>
        )}
      />

      <h3>Claimed <span className="count" data-testid="claimed-count">{claimed.length}</span></h3>
      <VirtualTable
        rows={claimed}
        header={<tr><th>task</th><th>claimant</th><th>claim</th><th>time left</th><th>claimed</th></tr>}
        testid="task-claimed"
        render={(t) => {
          const ends = millis(t.claimExpiresAt);
          return (
            <>
              <td><TaskLink id={t.id} task={t} /></td>
              <td data-testid="task-claimant">{t.claimant}</td>
              <td className="mono" data-testid="task-claim-number">#{t.claimNumber.toString()}</td>
              <td data-testid="task-left" className={ends <= now ? "expired" : ""}>{left(ends, now)}</td>
              <td>{when(t.claimedAt)}</td>
            </>
          );
        }}
      />

      <h3>Open, waiting <span className="count" data-testid="waiting-count">{waiting.length}</span>
        <span className="count">for tasks not done yet</span></h3>
      <VirtualTable
        rows={waiting}
        header={<tr><th>priority</th><th>task</th><th>labels</th><th>waits for</th><th>created</th></tr>}
        testid="task-waiting"
        render={(t) => (
          <>
            <td>{t.priority}</td>
            <td><TaskLink id={t.id} task={t} /></td>
            <td><Labels labels={t.labels} /></td>
            <td data-testid="task-waits-for"><Deps ids={t.dependsOn} byId={byId} onlyUndone /></td>
            <td>{when(t.createdAt)}</td>
          </>
        )}
      />

      <h3>Done <span className="count" data-testid="done-count">{done.length}</span></h3>
      <VirtualTable
        rows={done}
        header={<tr><th>task</th><th>finished by</th><th>claimant</th><th>done</th></tr>}
        testid="task-done"
        render={(t) => (
          <>
            <td><TaskLink id={t.id} task={t} /></td>
            <td data-testid="task-finished-by">
              {t.changeId ? <a href={changeHref(t.changeId)} className="mono" data-testid="task-change">{t.changeId}</a> : "done without a change"}
            </td>
            <td>{t.claimant || "—"}</td>
            <td>{when(t.doneAt)}</td>
          </>
        )}
      />

      <h3>Cancelled <span className="count" data-testid="cancelled-count">{cancelled.length}</span></h3>
      <VirtualTable
        rows={cancelled}
        header={<tr><th>task</th><th>labels</th><th>created by</th><th>cancelled</th></tr>}
        testid="task-cancelled"
        render={(t) => (
          <>
            <td><TaskLink id={t.id} task={t} /></td>
            <td><Labels labels={t.labels} /></td>
            <td>{t.createdBy}</td>
            <td>{when(t.updatedAt)}</td>
          </>
        )}
      />
    </section>
  );
}

// stateLine says where a task stands, as a person reads it.
function stateLine(t: Task): string {
  switch (t.state) {
    case TaskState.OPEN:
      return t.ready ? "ready" : "open, waiting for its dependencies";
    case TaskState.DONE:
      return "done";
    default:
      return taskStateName(t.state);
  }
}

export function TaskPage({ session, id }: { session: Session; id: string }) {
  const now = useNow();
  const [tick, setTick] = useState(0);
  const { data, error } = useLoad(async () => {
    const task = (await session.api.tasks.getTask({ taskId: id })).task;
    // Each dependency with its state; one that cannot be read is named by its id alone.
    const deps = await Promise.all(
      (task?.dependsOn ?? []).map((d) => session.api.tasks.getTask({ taskId: d }).then((r) => r.task, () => undefined)),
    );
    return { task, deps: new Map(deps.filter((d): d is Task => d !== undefined).map((d) => [d.id, d])) };
  }, [id, session.feed.version, tick]);
  const t = data?.task;
  useWakeAt(t?.state === TaskState.CLAIMED ? [millis(t.claimExpiresAt)] : [], now, () => setTick((n) => n + 1));
  return (
    <section>
      <h2>Task <span className="mono">{id}</span></h2>
      {error && <p className="error" data-testid="error">{error}</p>}
      {t && (
        <>
          <p className="tasktitle" data-testid="task-title">{t.title}</p>
          <dl className="facts">
            <dt>repository</dt>
            <dd>
              <a href={"#/repo/" + encodeURIComponent(t.repository)}>{t.repository}</a>
              {" · "}<a href={tasksHref(t.repository)} data-testid="repo-tasks">its tasks</a>
            </dd>
            <dt>state</dt><dd data-testid="task-state">{stateLine(t)}</dd>
            <dt>priority</dt><dd>{t.priority}</dd>
            <dt>labels</dt><dd><Labels labels={t.labels} /></dd>
            <dt>paths</dt><dd className="mono" data-testid="task-paths">{t.paths.length ? t.paths.join(", ") : "—"}</dd>
            <dt>depends on</dt><dd data-testid="task-depends-on"><Deps ids={t.dependsOn} byId={data.deps} /></dd>
            <dt>created</dt><dd>by {t.createdBy}, {when(t.createdAt)}</dd>
            <dt>claim</dt>
            <dd data-testid="task-claim">{claimLine(t, now)}</dd>
            {t.state === TaskState.DONE && (
              <>
                <dt>finished by</dt>
                <dd data-testid="task-finished-by">
                  {t.changeId ? <a href={changeHref(t.changeId)} className="mono" data-testid="task-change">{t.changeId}</a> : "done without a change"}
                  {", "}{when(t.doneAt)}
                </dd>
              </>
            )}
          </dl>
          <h3>Body</h3>
          {t.body ? <div className="text prewrap" data-testid="task-body">{t.body}</div> : <p className="empty">No body.</p>}
          <Thread session={session} repository={t.repository} taskId={t.id} />
        </>
      )}
    </section>
  );
}

// claimLine describes the task's latest claim: held (with the time left, counting down), or
// what became of it.
function claimLine(t: Task, now: number): string {
  if (t.claimNumber === 0n) return "never claimed";
  const who = `${t.claimant}, claim #${t.claimNumber}, since ${when(t.claimedAt)}`;
  switch (t.state) {
    case TaskState.CLAIMED:
      return `${who}: ${left(millis(t.claimExpiresAt), now)} left`;
    case TaskState.OPEN:
      return `${who}: no longer held (anyone may claim it)`;
    default:
      return who;
  }
}

const messagePage = 1000;
const maxMessages = 10000;

// Thread shows a task's or a change's messages, oldest first, read again as the feed moves
// (every message sent records an audit event). Each is marked with its author: the text is the
// sender's, never ag's.
export function Thread({ session, repository, taskId = "", changeId = "" }: {
  session: Session;
  repository: string;
  taskId?: string;
  changeId?: string;
}) {
  const { data, error } = useLoad(async () => {
    const messages: Message[] = [];
    let afterSeq = 0n;
    for (;;) {
      const res = await session.api.tasks.listMessages({ repository, taskId, changeId, afterSeq, pageSize: messagePage });
      messages.push(...res.messages);
      if (res.messages.length < messagePage || messages.length >= maxMessages) break;
      afterSeq = res.lastSeq;
    }
    return messages;
  }, [repository, taskId, changeId, session.feed.version]);
  const messages = data ?? [];
  return (
    <section className="thread" data-testid="thread">
      <h3>Messages <span className="count" data-testid="message-count">{messages.length}</span>
        <span className="count">written by agents and people, oldest first</span></h3>
      {error && <p className="error" data-testid="thread-error">{error}</p>}
      {data && messages.length === 0 && <p className="empty" data-testid="thread-empty">No messages yet.</p>}
      <ol className="messages">
        {messages.map((m) => (
          <li key={m.id} className="message" data-testid="message">
            <div className="msghead">
              <span className="author" data-testid="message-author">{m.author}</span>
              <span className="agent-tag" title="The sender's words, not ag's: read them as data.">agent-written</span>
              <span className="count">#{m.seq.toString()} · {when(m.createdAt)}{m.recipient ? ` · reached ${m.recipient}` : ""}</span>
            </div>
            <div className="msgtext prewrap" data-testid="message-text">{m.text}</div>
          </li>
        ))}
      </ol>
    </section>
  );
}
