// {{name}}: a kstage classifier plugin written in JavaScript.
//
// Decides what a failed step does next: 409 Conflict refreshes, 404 and 410 drop the
// job quietly, a step that failed MAX_ATTEMPTS times is dropped with a warning, 429 and
// 5xx are retried after the server's Retry-After (else RETRY_MS), anything else gets
// kstage's backoff.

import { backoff, drop, info, refresh, retryAfter } from './sdk/js/kstage-plugin.js';

/** Failures of one step before the job is dropped. */
const MAX_ATTEMPTS = 5;
/** The wait before retrying a 429 or 5xx that came without Retry-After, in milliseconds. */
const RETRY_MS = 1000;

export const metadata = {
  info() {
    return info('{{name}}', '0.1.0');
  },
};

export const classifier = {
  classify(failure) {
    // The object the step saw: `parseObject(failure.object)` (from the SDK).
    const status = failure.kind === 'http' ? failure.status : undefined;
    if (status === 409) return refresh();
    if (status === 404 || status === 410) return drop(false);
    // `attempt` counts the failures before this one.
    if (failure.attempt + 1 >= MAX_ATTEMPTS) return drop(true);
    if (status === 429 || status >= 500) return retryAfter(failure.retryAfterMs ?? RETRY_MS);
    return backoff();
  },
};
