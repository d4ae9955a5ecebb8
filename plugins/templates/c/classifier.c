// {{name}}: a kstage classifier plugin written in C.
//
// Decides what a failed step does next: 409 Conflict refreshes, 404 and 410 drop the
// job quietly, a step that failed MAX_ATTEMPTS times is dropped with a warning, 429 and
// 5xx are retried after the server's Retry-After (else RETRY_MS), anything else gets
// kstage's backoff.
//
// Memory: the failure's strings are the plugin's to free.

#include <stdint.h>

#include "classifier_plugin.h"

typedef kstage_plugin_types_decision_t decision_t;

enum {
  MAX_ATTEMPTS = 5, // failures of one step before the job is dropped
  RETRY_MS = 1000,  // the wait before retrying a 429 or 5xx without Retry-After
};

static decision_t decision(uint8_t tag) { return (decision_t){.tag = tag}; }

static decision_t decide(const kstage_plugin_types_failure_t *f) {
  unsigned status = 0;
  if (f->kind == KSTAGE_PLUGIN_TYPES_FAILURE_KIND_HTTP && f->status.is_some)
    status = f->status.val;
  if (status == 409)
    return decision(KSTAGE_PLUGIN_TYPES_DECISION_REFRESH);
  decision_t d = decision(KSTAGE_PLUGIN_TYPES_DECISION_DROP);
  if (status == 404 || status == 410) {
    d.val.drop = false;
    return d;
  }
  // `attempt` counts the failures before this one.
  if (f->attempt + 1 >= MAX_ATTEMPTS) {
    d.val.drop = true; // with a Warning event
    return d;
  }
  if (status == 429 || status >= 500) {
    d = decision(KSTAGE_PLUGIN_TYPES_DECISION_RETRY_AFTER);
    d.val.retry_after = f->retry_after_ms.is_some ? f->retry_after_ms.val : RETRY_MS;
    return d;
  }
  return decision(KSTAGE_PLUGIN_TYPES_DECISION_BACKOFF);
}

void exports_kstage_plugin_classifier_classify(kstage_plugin_types_failure_t *failure,
                                               decision_t *ret) {
  // The object the step saw is JSON text: failure->object.ptr, failure->object.len.
  *ret = decide(failure);
  kstage_plugin_types_failure_free(failure);
}

void exports_kstage_plugin_metadata_info(exports_kstage_plugin_metadata_plugin_info_t *ret) {
  classifier_plugin_string_dup(&ret->name, "{{name}}");
  classifier_plugin_string_dup(&ret->version, "0.1.0");
  classifier_plugin_string_dup(&ret->interface_version, "0.1.0");
}
