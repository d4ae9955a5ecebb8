// json-fill: a kstage renderer plugin written in JavaScript.
//
// A step's template is JSON text. Every string in it may hold `${...}` placeholders
// that are filled from the object being played:
//
//   "${PATH}"           the whole string is replaced by the value at PATH (any JSON
//                       type; null when the path is missing)
//   "x-${PATH}-y"       the value is written into the string as text
//   "${now}"            kstage's current time (host `now()`, RFC 3339)
//   "${stage}"          the name of the Stage being played
//   "$${"               a literal "${"
//
// PATH is a chain of `.name`, `[index]` and `["quoted key"]` selectors, for example
// `metadata.name`, `status.conditions[0].type` or
// `metadata.labels["app.kubernetes.io/name"]`.

import { now } from 'kstage:plugin/host@0.1.0';

export const metadata = {
  info() {
    return { name: 'json-fill', version: '0.1.0', interfaceVersion: '0.1.0' };
  },
};

export const renderer = {
  // `render` returns the filled JSON; a thrown string becomes the `err` answer.
  render(stage, template, object) {
    let tree;
    try {
      tree = JSON.parse(template);
    } catch (e) {
      throw `template is not JSON: ${e.message}`;
    }
    let obj;
    try {
      obj = JSON.parse(object);
    } catch (e) {
      throw `object is not JSON: ${e.message}`;
    }
    const ctx = { stage, obj, now: undefined };
    return JSON.stringify(fill(tree, ctx));
  },
};

// A value that is not there; distinct from JSON null.
const MISSING = Symbol('missing');

function fill(node, ctx) {
  if (typeof node === 'string') return fillString(node, ctx);
  if (Array.isArray(node)) return node.map((item) => fill(item, ctx));
  if (node !== null && typeof node === 'object') {
    const out = {};
    for (const key of Object.keys(node)) {
      // defineProperty, so a key named "__proto__" stays an ordinary key.
      Object.defineProperty(out, key, {
        value: fill(node[key], ctx),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return node;
}

function fillString(text, ctx) {
  if (!text.includes('$')) return text;
  const parts = split(text);
  if (parts.length === 1 && typeof parts[0] !== 'string') {
    const value = evaluate(parts[0].expr, ctx);
    return value === MISSING ? null : value;
  }
  let out = '';
  for (const part of parts) {
    if (typeof part === 'string') {
      out += part;
      continue;
    }
    const value = evaluate(part.expr, ctx);
    if (value === MISSING) continue;
    out += typeof value === 'string' ? value : JSON.stringify(value);
  }
  return out;
}

// Splits a string into literal text and `{expr}` placeholders.
function split(text) {
  const parts = [];
  let literal = '';
  let i = 0;
  while (i < text.length) {
    if (text.startsWith('$${', i)) {
      literal += '${';
      i += 3;
    } else if (text.startsWith('${', i)) {
      const end = closing(text, i + 2);
      if (end < 0) throw `unterminated placeholder in ${JSON.stringify(text)}`;
      if (literal) parts.push(literal);
      literal = '';
      parts.push({ expr: text.slice(i + 2, end) });
      i = end + 1;
    } else {
      literal += text[i];
      i += 1;
    }
  }
  if (literal || parts.length === 0) parts.push(literal);
  return parts;
}

// The index of the `}` closing a placeholder whose text starts at `from`, skipping
// quoted keys (which may contain `}`); -1 when there is none.
function closing(text, from) {
  let quote = null;
  for (let i = from; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === '\\') i += 1;
      else if (c === quote) quote = null;
    } else if (c === '"' || c === "'") {
      quote = c;
    } else if (c === '}') {
      return i;
    }
  }
  return -1;
}

function evaluate(text, ctx) {
  const expr = text.trim();
  if (expr === 'now') {
    if (ctx.now === undefined) ctx.now = now();
    return ctx.now;
  }
  if (expr === 'stage') return ctx.stage;
  return lookup(ctx.obj, parsePath(expr));
}

const NAME = /[A-Za-z0-9_-]/;

// Parses `a.b[0]["c.d"]` into ['a', 'b', 0, 'c.d'] (numbers are array indexes).
function parsePath(expr) {
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

function lookup(value, steps) {
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
