// {{name}}: a kstage selector plugin written in JavaScript.
//
// Plays the heaviest candidate Stage (the first of equal weights) instead of kstage's
// weighted random choice, and lets no Stage wait longer than MAX_DELAY_MS.
//
// Weights and delays are BigInts (the WIT's s64); a delay is undefined when there is
// none.

import { info, selection } from './sdk/js/kstage-plugin.js';

/** The longest a chosen Stage may wait, in milliseconds. */
const MAX_DELAY_MS = 1000n;

export const metadata = {
  info() {
    return info('{{name}}', '0.1.0');
  },
};

export const selector = {
  // A thrown string is the `err` answer.
  select(object, candidates) {
    // The object is at hand: `parseObject(object).get('spec.nodeName')`, `.label('app')`.
    let heaviest = candidates[0];
    for (const c of candidates) {
      if (c.weight > heaviest.weight) heaviest = c;
    }
    // undefined keeps the delay kstage drew.
    const capped = heaviest.delayMs !== undefined && heaviest.delayMs > MAX_DELAY_MS;
    return selection(heaviest, capped ? MAX_DELAY_MS : undefined);
  },
};
