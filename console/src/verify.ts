// The audit log verified in the browser, with the key the person holds, so that the answer
// does not rest on the page's server: the checkpoint's Ed25519 signature (a C2SP signed note),
// every event's canonical form and chained hash, and the RFC 6962 Merkle root of the events
// the checkpoint covers (docs/audit.md). It reads an export (`ag audit export`) or the server's
// log through the API; either way the hashes are computed here, from the events' text.
import * as ed from "@noble/ed25519";
import { sha256, sha512 } from "@noble/hashes/sha2.js";

ed.hashes.sha512 = sha512;

const enc = new TextEncoder();

export interface VerifierKey {
  name: string;
  hash: number;
  publicKey: Uint8Array;
}

// parseVerifierKey reads "<name>+<8 hex digits>+<base64 of 0x01 and the 32-byte key>".
export function parseVerifierKey(text: string): VerifierKey {
  // The key's base64 may hold '+' itself: the name ends at the first '+', the hash is the next
  // eight characters.
  const m = /^([^+\s]+)\+([^+]*)\+(\S+)$/.exec(text.trim());
  if (!m) throw new Error("a verifier key is <name>+<hash>+<key>, as ag serve writes it next to its audit key (FILE.pub)");
  const [, name, hashHex, b64] = m as unknown as [string, string, string, string];
  if (!/^[0-9a-f]{8}$/.test(hashHex)) throw new Error(`the key's hash ${JSON.stringify(hashHex)} is not 8 hex digits`);
  const data = fromBase64(b64);
  if (data.length !== 33 || data[0] !== 1) throw new Error("the key is not an Ed25519 note key");
  const want = keyHash(name, data);
  if (want !== parseInt(hashHex, 16)) throw new Error("the key's hash does not match its name and key: it was altered");
  return { name, hash: want, publicKey: data.slice(1) };
}

function keyHash(name: string, keyData: Uint8Array): number {
  const h = sha256(concat(enc.encode(name + "\n"), keyData));
  return ((h[0]! << 24) | (h[1]! << 16) | (h[2]! << 8) | h[3]!) >>> 0;
}

export interface Checkpoint {
  origin: string;
  size: number;
  root: Uint8Array;
  head: Uint8Array;
}

// openNote verifies a signed note with key and answers its checkpoint.
export function openNote(note: string, key: VerifierKey): Checkpoint {
  const split = note.lastIndexOf("\n\n");
  if (split < 0) throw new Error("the checkpoint is not a signed note (no blank line before its signatures)");
  const text = note.slice(0, split + 1);
  const sigs = note.slice(split + 2).split("\n").filter((l) => l !== "");
  let verified = false;
  for (const line of sigs) {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m || m[1] !== key.name) continue;
    const raw = fromBase64(m[2]!);
    if (raw.length !== 68) continue;
    const hash = ((raw[0]! << 24) | (raw[1]! << 16) | (raw[2]! << 8) | raw[3]!) >>> 0;
    if (hash !== key.hash) continue;
    if (!ed.verify(raw.slice(4), enc.encode(text), key.publicKey)) {
      throw new Error("the checkpoint's signature does not verify with the key: the checkpoint was altered, or another key signed it");
    }
    verified = true;
  }
  if (!verified) throw new Error(`the checkpoint carries no signature by the key ${key.name}+${key.hash.toString(16).padStart(8, "0")}`);
  const lines = text.slice(0, -1).split("\n");
  if (lines.length !== 4 || !/^\d+$/.test(lines[1]!) || !lines[3]!.startsWith("head ")) {
    throw new Error("the checkpoint's text is not origin, size, root hash, head hash");
  }
  return { origin: lines[0]!, size: Number(lines[1]), root: fromBase64(lines[2]!), head: fromBase64(lines[3]!.slice(5)) };
}

// RawEvent is an event as an export line or the API gives it: details as their JSON text.
export interface RawEvent {
  seq: number;
  time: string;
  principal: string;
  holder: string;
  action: string;
  subject: string;
  details: string; // JSON text, "" or "null" for none
  prevHash: Uint8Array;
  hash: Uint8Array;
}

export interface Verdict {
  ok: boolean;
  size: number; // events the checkpoint covers
  events: number; // events read
  reason: string;
  origin?: string;
}

// verifyEvents checks events (from seq 1, in order) against the note, signed by key.
export function verifyEvents(events: RawEvent[], note: string, key: VerifierKey): Verdict {
  let cp: Checkpoint;
  try {
    cp = openNote(note, key);
  } catch (err) {
    return { ok: false, size: 0, events: events.length, reason: (err as Error).message };
  }
  const bad = (reason: string): Verdict => ({ ok: false, size: cp.size, events: events.length, reason, origin: cp.origin });
  if (events.length < cp.size) return bad(`the checkpoint covers ${cp.size} events, and only ${events.length} were read`);
  let prev = new Uint8Array(32);
  const leaves: Uint8Array[] = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    if (e.seq !== i + 1) return bad(`event ${i + 1}: its seq is ${e.seq}: an event was removed, added or moved`);
    if (!equal(e.prevHash, prev)) return bad(`event ${e.seq}: its prev_hash is not the hash of event ${e.seq - 1}`);
    let canon: Uint8Array;
    try {
      canon = canonical(e);
    } catch (err) {
      return bad(`event ${e.seq}: ${(err as Error).message}`);
    }
    const h = sha256(concat(prev, canon));
    if (!equal(h, e.hash)) return bad(`event ${e.seq}: its hash does not match its contents: the event was altered`);
    if (i < cp.size) leaves.push(sha256(concat(Uint8Array.of(0), canon)));
    prev = h;
  }
  if (cp.size > 0 && !equal(events[cp.size - 1]!.hash, cp.head)) return bad(`event ${cp.size}'s hash is not the checkpoint's head`);
  if (!equal(merkleRoot(leaves), cp.root)) return bad(`the Merkle root of the ${cp.size} events is not the checkpoint's: the log was altered`);
  return { ok: true, size: cp.size, events: events.length, reason: "", origin: cp.origin };
}

// parseExport reads `ag audit export`: one event per line, then {"checkpoint": note}.
export function parseExport(text: string): { events: RawEvent[]; note: string } {
  const events: RawEvent[] = [];
  let note = "";
  const lines = text.split("\n").filter((l) => l.trim() !== "");
  for (const [i, line] of lines.entries()) {
    const v = parseJSON(line);
    if (!isObject(v)) throw new Error(`line ${i + 1} is not a JSON object`);
    if ("checkpoint" in v.members) {
      const c = v.members.checkpoint;
      if (!c || c.kind !== "string") throw new Error(`line ${i + 1}: the checkpoint is not a string`);
      note = c.value;
      continue;
    }
    const str = (k: string): string => {
      const m = v.members[k];
      if (!m || m.kind !== "string") throw new Error(`line ${i + 1}: ${k} is missing or not a string`);
      return m.value;
    };
    const seq = v.members.seq;
    if (!seq || seq.kind !== "number" || !/^\d+$/.test(seq.text)) throw new Error(`line ${i + 1}: seq is not a whole number`);
    const details = v.members.details;
    events.push({
      seq: Number(seq.text), time: str("time"), principal: str("principal"), holder: str("holder"), action: str("action"),
      subject: str("subject"), details: details ? serialize(details) : "", prevHash: fromHex(str("prev_hash")), hash: fromHex(str("hash")),
    });
  }
  if (!note) throw new Error("the export has no checkpoint line: it is cut short");
  return { events, note };
}

// canonical answers the bytes an event's hashes cover.
export function canonical(e: RawEvent): Uint8Array {
  const details = e.details.trim() === "" || e.details.trim() === "null" ? "null" : canonicalJSON(parseJSON(e.details));
  const s = `{"seq":${e.seq},"time":"${canonicalTime(e.time)}","principal":${quote(e.principal)},"holder":${quote(e.holder)},` +
    `"action":${quote(e.action)},"subject":${quote(e.subject)},"details":${details}}`;
  return enc.encode(s);
}

// canonicalTime writes an RFC 3339 time in UTC with exactly six fractional digits (truncated).
function canonicalTime(t: string): string {
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$/i.exec(t);
  if (!m) throw new Error(`time ${JSON.stringify(t)} is not RFC 3339`);
  const frac = (m[2] ?? "").slice(0, 6).padEnd(6, "0");
  const d = new Date(m[1] + (m[3]!.toUpperCase() === "Z" ? "Z" : m[3]!));
  if (isNaN(d.getTime())) throw new Error(`time ${JSON.stringify(t)} is not a time`);
  return d.toISOString().slice(0, 19) + "." + frac + "Z";
}

// JSON kept as written: numbers as their text, objects with every member in order.
type Json =
  | { kind: "null" | "true" | "false" }
  | { kind: "number"; text: string }
  | { kind: "string"; value: string }
  | { kind: "array"; items: Json[] }
  | { kind: "object"; keys: string[]; members: Record<string, Json> };

function isObject(v: Json): v is Extract<Json, { kind: "object" }> {
  return v.kind === "object";
}

export function parseJSON(text: string): Json {
  let i = 0;
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
  };
  const fail = (what: string): never => {
    throw new Error(`details are not JSON: ${what} at ${i}`);
  };
  const value = (depth: number): Json => {
    if (depth > 1000) fail("too deep");
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const keys: string[] = [];
      const members: Record<string, Json> = Object.create(null);
      ws();
      if (text[i] === "}") {
        i++;
        return { kind: "object", keys, members };
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("a key");
        const k = str();
        ws();
        if (text[i++] !== ":") fail("':'");
        const v = value(depth + 1);
        if (!(k in members)) keys.push(k);
        members[k] = v; // the last of equal keys, as a map keeps it
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] !== "}") fail("',' or '}'");
        return { kind: "object", keys, members };
      }
    }
    if (c === "[") {
      i++;
      const items: Json[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return { kind: "array", items };
      }
      for (;;) {
        items.push(value(depth + 1));
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] !== "]") fail("',' or ']'");
        return { kind: "array", items };
      }
    }
    if (c === '"') return { kind: "string", value: str() };
    for (const lit of ["null", "true", "false"] as const) {
      if (text.startsWith(lit, i)) {
        i += lit.length;
        return { kind: lit };
      }
    }
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
    if (!m) fail("a value");
    i += m![0].length;
    return { kind: "number", text: m![0] };
  };
  const str = (): string => {
    const start = i;
    i++;
    let out = "";
    for (;;) {
      const c = text[i];
      if (c === undefined) return fail("an unterminated string");
      if (c === '"') {
        i++;
        return out;
      }
      if (c === "\\") {
        const n = text[i + 1];
        const simple: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
        if (n !== undefined && n in simple) {
          out += simple[n];
          i += 2;
          continue;
        }
        if (n === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) {
          out += String.fromCharCode(parseInt(text.slice(i + 2, i + 6), 16));
          i += 6;
          continue;
        }
        fail("a bad escape in the string from " + start);
      }
      if (c < " ") fail("a control character in a string");
      out += c;
      i++;
    }
  };
  const v = value(0);
  ws();
  if (i !== text.length) fail("text after the value");
  return v;
}

// canonicalJSON writes JSON as Go's encoding/json re-encodes it: no whitespace, object keys in
// the order of their UTF-8 bytes, numbers as written, strings re-escaped.
function canonicalJSON(v: Json): string {
  switch (v.kind) {
    case "null":
    case "true":
    case "false":
      return v.kind;
    case "number":
      return v.text;
    case "string":
      return quote(v.value);
    case "array":
      return "[" + v.items.map(canonicalJSON).join(",") + "]";
    case "object": {
      const keys = [...v.keys].sort(byUTF8);
      return "{" + keys.map((k) => quote(k) + ":" + canonicalJSON(v.members[k]!)).join(",") + "}";
    }
  }
}

// serialize writes a parsed value back as compact JSON in its own member order (to carry an
// export's details on as text).
function serialize(v: Json): string {
  switch (v.kind) {
    case "object":
      return "{" + v.keys.map((k) => quote(k) + ":" + serialize(v.members[k]!)).join(",") + "}";
    case "array":
      return "[" + v.items.map(serialize).join(",") + "]";
    default:
      return canonicalJSON(v);
  }
}

function byUTF8(a: string, b: string): number {
  const x = enc.encode(a);
  const y = enc.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i]! - y[i]!;
  }
  return x.length - y.length;
}

// quote escapes as Go's encoding/json does with HTML escaping off: '"', '\\' and control
// characters, U+2028 and U+2029; a lone surrogate becomes U+FFFD, as invalid UTF-8 does in Go.
export function quote(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c < 0x20) {
      const named: Record<number, string> = { 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t" };
      out += named[c] ?? "\\u00" + c.toString(16).padStart(2, "0");
    } else if (c === 0x2028 || c === 0x2029) out += "\\u" + c.toString(16);
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && s.charCodeAt(i + 1) >= 0xdc00 && s.charCodeAt(i + 1) <= 0xdfff) {
      out += s[i]! + s[i + 1]!;
      i++;
    } else if (c >= 0xd800 && c <= 0xdfff) out += "\ufffd";
    else out += s[i];
  }
  return out + '"';
}

// merkleRoot is RFC 6962's tree hash over leaf hashes (golang.org/x/mod/sumdb/tlog).
export function merkleRoot(leaves: Uint8Array[]): Uint8Array {
  if (leaves.length === 0) return sha256(new Uint8Array());
  let level = leaves;
  // Bottom-up: pair neighbours; an odd last node is carried up unchanged, which gives the same
  // root as RFC 6962's split at the largest power of two below n.
  while (level.length > 1) {
    const next: Uint8Array[] = [];
    for (let i = 0; i + 1 < level.length; i += 2) next.push(sha256(concat(Uint8Array.of(1), level[i]!, level[i + 1]!)));
    if (level.length % 2 === 1) next.push(level[level.length - 1]!);
    level = next;
  }
  return level[0]!;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export function fromHex(s: string): Uint8Array {
  if (!/^([0-9a-f]{2})*$/.test(s)) throw new Error(`${JSON.stringify(s.slice(0, 20))} is not lowercase hex`);
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function fromBase64(s: string): Uint8Array {
  let bin: string;
  try {
    bin = atob(s);
  } catch {
    throw new Error(`${JSON.stringify(s.slice(0, 20))} is not base64`);
  }
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}
