// Helpers for kstage plugins written in JavaScript (componentize-js).
//
// An ES module with no imports of its own: a plugin imports it by a relative path and
// the build puts it beside the plugin's source (componentize-js reads the modules of
// the source's folder). Everything works in plain Node too, for unit tests.
//
//   import { parseObject, find, selection } from '../../sdk/js/kstage-plugin.js';
//
//   export const selector = {
//     select(object, candidates) {
//       const obj = parseObject(object);                // throws "object is not JSON: ..."
//       const wanted = obj.label('example.com/next');   // undefined when absent
//       return selection(find(candidates, wanted) ?? candidates[0]);
//     },
//   };
//
// Paths are a name followed by selectors: `.name`, `[N]` (an array element) and
// `["key"]` or `['key']` (a field whose name has other characters; `\` escapes the
// quote): `metadata.name`, `status.conditions[0].type`,
// `metadata.labels["app.kubernetes.io/name"]`. Names are letters, digits, `_` and `-`.
// A path may start with a quoted key. A selector that does not fit the value makes the
// path missing (MISSING, distinct from JSON null); only own fields are read.
//
// componentize-js maps the WIT's s64/u64 to BigInt: candidate weights and delays, and
// host random(), are BigInts. The helpers here accept numbers or BigInts.

export const INTERFACE_VERSION = '0.1.0';

/** A value that is not there; distinct from JSON null. */
export const MISSING = Symbol('missing');

const NAME = /[A-Za-z0-9_-]/;

/** Parses `a.b[0]["c.d"]` into ['a', 'b', 0, 'c.d'] (numbers are array indexes);
 *  throws the string `invalid path "<PATH>": <why>` when it does not parse. */
export function parsePath(expr) {
  const bad = (why) => {
    throw `invalid path ${JSON.stringify(expr)}: ${why}`;
  };
  const steps = [];
  let i = 0;
  const name = () => {
    const start = i;
    while (i < expr.length && NAME.test(expr[i])) i += 1;
    if (i === start) bad(i < expr.length ? `unexpected ${JSON.stringify(expr[i])} at ${i}` : 'ends after "."');
    steps.push(expr.slice(start, i));
  };
  if (expr.length === 0) bad('empty');
  if (expr[0] !== '[') name();
  while (i < expr.length) {
    const c = expr[i];
    if (c === '.') {
      i += 1;
      name();
    } else if (c === '[') {
      i += 1;
      const q = expr[i];
      if (q === '"' || q === "'") {
        let key = '';
        i += 1;
        for (;;) {
          if (i >= expr.length) bad('unterminated quoted key');
          const k = expr[i];
          if (k === q) break;
          if (k === '\\') {
            i += 1;
            if (i >= expr.length) bad('unterminated quoted key');
          }
          key += expr[i];
          i += 1;
        }
        i += 1;
        steps.push(key);
      } else {
        const start = i;
        while (i < expr.length && expr[i] >= '0' && expr[i] <= '9') i += 1;
        if (i === start) bad(`expected an index or a quoted key at ${start}`);
        steps.push(Number(expr.slice(start, i)));
      }
      if (expr[i] !== ']') bad(`expected "]" at ${i}`);
      i += 1;
    } else {
      bad(`unexpected ${JSON.stringify(c)} at ${i}`);
    }
  }
  return steps;
}

const own = (value, key) => Object.prototype.hasOwnProperty.call(value, key);

/** The value reached by steps (strings: object fields; numbers: array indexes), or
 *  MISSING. */
export function lookup(value, steps) {
  for (const step of steps) {
    if (typeof step === 'number') {
      if (!Array.isArray(value) || step >= value.length) return MISSING;
      value = value[step];
    } else {
      if (value === null || typeof value !== 'object' || Array.isArray(value) || !own(value, step)) {
        return MISSING;
      }
      value = value[step];
    }
  }
  return value;
}

/** The value at path in decoded JSON, or MISSING; throws when the path is malformed. */
export function get(value, path) {
  return lookup(value, parsePath(path));
}

const stringsOf = (value) => {
  const out = {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return out;
  for (const key of Object.keys(value)) {
    if (typeof value[key] === 'string') {
      Object.defineProperty(out, key, { value: value[key], enumerable: true, writable: true, configurable: true });
    }
  }
  return out;
};

/** A Kubernetes object: the JSON text kstage passed, decoded once. */
export class KObject {
  constructor(tree, text = '') {
    this.tree = tree;
    this.text = text;
  }

  /** The value at path, or MISSING; throws when the path is malformed. */
  get(path) {
    return get(this.tree, path);
  }

  /** The value reached by steps, or MISSING. */
  getIn(...steps) {
    return lookup(this.tree, steps);
  }

  /** metadata.name ('' when absent). */
  get name() {
    const v = this.getIn('metadata', 'name');
    return typeof v === 'string' ? v : '';
  }

  /** metadata.namespace ('' when absent). */
  get namespace() {
    const v = this.getIn('metadata', 'namespace');
    return typeof v === 'string' ? v : '';
  }

  /** The label key; undefined when absent or not a string. */
  label(key) {
    const v = this.getIn('metadata', 'labels', key);
    return typeof v === 'string' ? v : undefined;
  }

  /** The annotation key; undefined when absent or not a string. */
  annotation(key) {
    const v = this.getIn('metadata', 'annotations', key);
    return typeof v === 'string' ? v : undefined;
  }

  /** metadata.labels with string values ({} when absent). */
  labels() {
    return stringsOf(this.getIn('metadata', 'labels'));
  }

  /** metadata.annotations with string values ({} when absent). */
  annotations() {
    return stringsOf(this.getIn('metadata', 'annotations'));
  }
}

/** Decode the object kstage passed; throws the string `object is not JSON: ...`. */
export function parseObject(text) {
  try {
    return new KObject(JSON.parse(text), text);
  } catch (e) {
    throw `object is not JSON: ${e.message}`;
  }
}

/** The candidate named name, or undefined. */
export function find(candidates, name) {
  return candidates.find((c) => c.name === name);
}

/** The sum of the positive weights, as a BigInt. */
export function totalWeight(candidates) {
  let total = 0n;
  for (const c of candidates) if (BigInt(c.weight) > 0n) total += BigInt(c.weight);
  return total;
}

/** The candidate at point (modulo the total) on the cumulative positive weights, in
 *  candidate order; with no positive weight, the one at point modulo their number. */
export function weighted(candidates, point) {
  const total = totalWeight(candidates);
  let p = BigInt(point);
  if (total === 0n) return candidates[Number(p % BigInt(candidates.length))];
  p %= total;
  for (const c of candidates) {
    const w = BigInt(c.weight);
    if (w <= 0n) continue;
    if (p < w) return c;
    p -= w;
  }
  throw 'not reached: point < total';
}

/** The select answer choosing a candidate (or a Stage name); no delayMs keeps kstage's. */
export function selection(chosen, delayMs) {
  const stage = typeof chosen === 'string' ? chosen : chosen.name;
  return { stage, delayMs: delayMs === undefined || delayMs === null ? undefined : BigInt(delayMs) };
}

/** Retry the same step after exactly ms milliseconds. */
export const retryAfter = (ms) => ({ tag: 'retry-after', val: BigInt(ms) });
/** Retry the same step after kstage's backoff. */
export const backoff = () => ({ tag: 'backoff' });
/** Read the object again, then retry at once. */
export const refresh = () => ({ tag: 'refresh' });
/** Give up on the job; warn also records a Warning event. */
export const drop = (warn = false) => ({ tag: 'drop', val: Boolean(warn) });

/** The metadata.info answer, with this SDK's interface version. */
export const info = (name, version) => ({ name, version, interfaceVersion: INTERFACE_VERSION });
