// retry-budget: a kstage retry classifier written in C.
//
// Gives up after 5 failures on a 5xx, but retries 429 (Too Many Requests) forever.
// Bindings come from `wit-bindgen c` (generated at build time by build.sh).
//
// Memory: the host hands us the failure's strings (reason, message, stage, object)
// in memory it allocated through `cabi_realloc`; the bindings give ownership of them
// to this function and export no post-return for `classify`, so we free them here.
// `metadata.info` returns heap strings because its generated post-return frees them.

#include <stdint.h>
#include <string.h>

#include "classifier_plugin.h"

typedef kstage_plugin_types_decision_t decision_t;
typedef kstage_plugin_types_failure_t failure_t;

enum { GIVE_UP_AFTER = 4 }; // 5xx: back off while attempt < 4, drop on the 5th failure

static decision_t retry_after(uint64_t ms) {
  decision_t d = {.tag = KSTAGE_PLUGIN_TYPES_DECISION_RETRY_AFTER};
  d.val.retry_after = ms;
  return d;
}

static decision_t backoff(void) {
  return (decision_t){.tag = KSTAGE_PLUGIN_TYPES_DECISION_BACKOFF};
}

static decision_t refresh(void) {
  return (decision_t){.tag = KSTAGE_PLUGIN_TYPES_DECISION_REFRESH};
}

static decision_t drop(bool warn) {
  decision_t d = {.tag = KSTAGE_PLUGIN_TYPES_DECISION_DROP};
  d.val.drop = warn;
  return d;
}

static decision_t decide(const failure_t *f) {
  switch (f->kind) {
  case KSTAGE_PLUGIN_TYPES_FAILURE_KIND_HTTP: {
    // An http failure without a status is treated like an unknown status: back off.
    unsigned status = f->status.is_some ? f->status.val : 0;
    if (status == 429)
      return retry_after(f->retry_after_ms.is_some ? f->retry_after_ms.val : 1000);
    if (status >= 500 && status <= 599)
      return f->attempt < GIVE_UP_AFTER ? backoff() : drop(true);
    if (status == 409)
      return refresh();
    if (status == 404 || status == 410)
      return drop(false);
    if (status >= 400 && status <= 499)
      return drop(true);
    return backoff();
  }
  case KSTAGE_PLUGIN_TYPES_FAILURE_KIND_CONNECTION_REFUSED:
  case KSTAGE_PLUGIN_TYPES_FAILURE_KIND_CONNECTION_RESET:
  case KSTAGE_PLUGIN_TYPES_FAILURE_KIND_EOF:
  case KSTAGE_PLUGIN_TYPES_FAILURE_KIND_TIMEOUT:
    return backoff();
  case KSTAGE_PLUGIN_TYPES_FAILURE_KIND_TEMPLATE:
  case KSTAGE_PLUGIN_TYPES_FAILURE_KIND_EXPRESSION:
    return drop(true);
  default: // plugin, other
    return backoff();
  }
}

// A tiny bounded string builder: no stdio, so no WASI imports.
typedef struct {
  char buf[160];
  size_t len;
} line_t;

static void put(line_t *l, const char *s, size_t n) {
  size_t room = sizeof l->buf - l->len;
  if (n > room)
    n = room;
  memcpy(l->buf + l->len, s, n);
  l->len += n;
}

static void puts_(line_t *l, const char *s) { put(l, s, strlen(s)); }

static void putu(line_t *l, uint64_t v) {
  char digits[20];
  size_t i = sizeof digits;
  do {
    digits[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  put(l, digits + i, sizeof digits - i);
}

static const char *const KIND_NAMES[] = {
    "connection-refused", "connection-reset", "eof",    "timeout", "http",
    "template",           "expression",       "plugin", "other",
};

// One debug line per call, e.g. `http 503 attempt=2 -> backoff`.
static void log_decision(const failure_t *f, const decision_t *d) {
  line_t l = {.len = 0};
  puts_(&l, f->kind < sizeof KIND_NAMES / sizeof *KIND_NAMES ? KIND_NAMES[f->kind] : "?");
  if (f->status.is_some) {
    puts_(&l, " ");
    putu(&l, f->status.val);
  }
  puts_(&l, " attempt=");
  putu(&l, f->attempt);
  puts_(&l, " -> ");
  switch (d->tag) {
  case KSTAGE_PLUGIN_TYPES_DECISION_RETRY_AFTER:
    puts_(&l, "retry-after ");
    putu(&l, d->val.retry_after);
    puts_(&l, "ms");
    break;
  case KSTAGE_PLUGIN_TYPES_DECISION_BACKOFF:
    puts_(&l, "backoff");
    break;
  case KSTAGE_PLUGIN_TYPES_DECISION_REFRESH:
    puts_(&l, "refresh");
    break;
  default:
    puts_(&l, d->val.drop ? "drop (warn)" : "drop");
    break;
  }
  classifier_plugin_string_t msg = {(uint8_t *)l.buf, l.len}; // borrowed by the host
  kstage_plugin_host_log(KSTAGE_PLUGIN_TYPES_LEVEL_DEBUG, &msg);
}

void exports_kstage_plugin_classifier_classify(failure_t *failure, decision_t *ret) {
  *ret = decide(failure);
  log_decision(failure, ret);
  exports_kstage_plugin_classifier_failure_free(failure);
}

void exports_kstage_plugin_metadata_info(kstage_plugin_types_plugin_info_t *ret) {
  classifier_plugin_string_dup(&ret->name, "retry-budget");
  classifier_plugin_string_dup(&ret->version, "0.1.0");
  classifier_plugin_string_dup(&ret->interface_version, "0.1.0");
}
