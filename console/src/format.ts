import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

export function when(t: Timestamp | undefined): string {
  if (!t) return "—";
  return timestampDate(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function millis(t: Timestamp | undefined): number {
  return t ? timestampDate(t).getTime() : 0;
}

// left says how long until ms, from now: "4m 05s", or "expired".
export function left(ms: number, now: number): string {
  const s = Math.floor((ms - now) / 1000);
  if (s <= 0) return "expired";
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = String(s % 60).padStart(2, "0");
  return h > 0 ? `${h}h ${String(m).padStart(2, "0")}m` : `${m}m ${sec}s`;
}

export function short(id: string, n = 12): string {
  return id.length > n + 8 ? id.slice(0, n + 7) + "…" : id;
}

export function firstLine(s: string): string {
  const i = s.indexOf("\n");
  return i < 0 ? s : s.slice(0, i);
}
