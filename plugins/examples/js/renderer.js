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
// `metadata.labels["app.kubernetes.io/name"]`: the path syntax of kstage's JavaScript
// SDK (plugins/sdk/js), whose lookups this plugin uses.

import { now } from 'kstage:plugin/host@0.1.0';
import { MISSING, info, lookup, parseObject, parsePath } from '../../sdk/js/kstage-plugin.js';

export const metadata = {
  info() {
    return info('json-fill', '0.1.0');
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
    const obj = parseObject(object).tree;
    const ctx = { stage, obj, now: undefined };
    return JSON.stringify(fill(tree, ctx));
  },
};

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
