// A line diff of two texts as unified hunks (Myers' O(ND) algorithm), for showing a change's
// edits: small files, shown on demand.

export interface Hunk {
  header: string;
  lines: { kind: " " | "-" | "+"; text: string }[];
}

export function unifiedDiff(a: string, b: string, context = 3): Hunk[] {
  const x = splitLines(a);
  const y = splitLines(b);
  const ops = myers(x, y);
  const hunks: Hunk[] = [];
  let i = 0;
  while (i < ops.length) {
    while (i < ops.length && ops[i]!.kind === " ") i++;
    if (i >= ops.length) break;
    let start = Math.max(0, i - context);
    let end = i;
    // Extend while changes are within 2×context of each other.
    for (;;) {
      while (end < ops.length && ops[end]!.kind !== " ") end++;
      let next = end;
      while (next < ops.length && ops[next]!.kind === " ") next++;
      if (next < ops.length && next - end <= 2 * context) {
        end = next;
        continue;
      }
      break;
    }
    end = Math.min(ops.length, end + context);
    const slice = ops.slice(start, end);
    const first = ops[start]!;
    const aLen = slice.filter((o) => o.kind !== "+").length;
    const bLen = slice.filter((o) => o.kind !== "-").length;
    hunks.push({ header: `@@ -${first.ai + 1},${aLen} +${first.bi + 1},${bLen} @@`, lines: slice.map((o) => ({ kind: o.kind, text: o.text })) });
    i = end;
    start = end;
  }
  return hunks;
}

function splitLines(s: string): string[] {
  if (s === "") return [];
  const lines = s.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

interface Op {
  kind: " " | "-" | "+";
  text: string;
  ai: number; // the line's index in a (for " " and "-"), or where it goes
  bi: number;
}

function myers(a: string[], b: string[]): Op[] {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  const v = new Map<number, number>([[1, 0]]);
  const trace: Map<number, number>[] = [];
  outer: for (let d = 0; d <= max; d++) {
    trace.push(new Map(v));
    for (let k = -d; k <= d; k += 2) {
      let xk: number;
      if (k === -d || (k !== d && (v.get(k - 1) ?? 0) < (v.get(k + 1) ?? 0))) xk = v.get(k + 1) ?? 0;
      else xk = (v.get(k - 1) ?? 0) + 1;
      let yk = xk - k;
      while (xk < n && yk < m && a[xk] === b[yk]) {
        xk++;
        yk++;
      }
      v.set(k, xk);
      if (xk >= n && yk >= m) break outer;
    }
  }
  // Walk back through the trace.
  const ops: Op[] = [];
  let xk = n;
  let yk = m;
  for (let d = trace.length - 1; d >= 0; d--) {
    const vd = trace[d]!;
    const k = xk - yk;
    let prevK: number;
    if (k === -d || (k !== d && (vd.get(k - 1) ?? 0) < (vd.get(k + 1) ?? 0))) prevK = k + 1;
    else prevK = k - 1;
    const prevX = vd.get(prevK) ?? 0;
    const prevY = prevX - prevK;
    while (xk > prevX && yk > prevY) {
      xk--;
      yk--;
      ops.push({ kind: " ", text: a[xk]!, ai: xk, bi: yk });
    }
    if (d > 0) {
      if (xk === prevX) {
        yk--;
        ops.push({ kind: "+", text: b[yk]!, ai: xk, bi: yk });
      } else {
        xk--;
        ops.push({ kind: "-", text: a[xk]!, ai: xk, bi: yk });
      }
    }
  }
  return ops.reverse();
}
