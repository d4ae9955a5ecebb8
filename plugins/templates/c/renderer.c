// {{name}}: a kstage renderer plugin written in C.
//
// A Stage's template is JSON in which `${stage}` becomes the name of the Stage being
// played and `${now}` kstage's current time; the rest is sent as written (kstage checks
// that the result is JSON).
//
// Memory: the arguments are the plugin's to free; the answer is freed by the bindings
// after kstage has read it, so it is a heap buffer.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "renderer_plugin.h"

typedef renderer_plugin_string_t str_t;

// Whether text[at..] starts with the NUL-terminated token.
static bool starts_with(const str_t *text, size_t at, const char *token) {
  size_t n = strlen(token);
  return text->len - at >= n && memcmp(text->ptr + at, token, n) == 0;
}

// Appends n bytes to out (a buffer of *cap bytes, grown as needed).
static void append(str_t *out, size_t *cap, const uint8_t *bytes, size_t n) {
  if (out->len + n > *cap) {
    *cap = (out->len + n) * 2;
    out->ptr = realloc(out->ptr, *cap);
    if (out->ptr == NULL)
      abort();
  }
  memcpy(out->ptr + out->len, bytes, n);
  out->len += n;
}

bool exports_kstage_plugin_renderer_render(str_t *stage, str_t *template_,
                                           exports_kstage_plugin_renderer_json_t *object,
                                           exports_kstage_plugin_renderer_json_t *ret,
                                           str_t *err) {
  (void)err; // this plugin never fails: `return false` with *err set would.
  str_t now = {NULL, 0};
  size_t cap = template_->len + 1;
  *ret = (str_t){malloc(cap), 0};
  for (size_t i = 0; i < template_->len;) {
    if (starts_with(template_, i, "${stage}")) {
      append(ret, &cap, stage->ptr, stage->len);
      i += strlen("${stage}");
    } else if (starts_with(template_, i, "${now}")) {
      if (now.ptr == NULL)
        kstage_plugin_host_now(&now);
      append(ret, &cap, now.ptr, now.len);
      i += strlen("${now}");
    } else {
      append(ret, &cap, template_->ptr + i, 1);
      i++;
    }
  }
  renderer_plugin_string_free(&now);
  renderer_plugin_string_free(stage);
  renderer_plugin_string_free(template_);
  exports_kstage_plugin_renderer_json_free(object);
  return true;
}

void exports_kstage_plugin_metadata_info(exports_kstage_plugin_metadata_plugin_info_t *ret) {
  renderer_plugin_string_dup(&ret->name, "{{name}}");
  renderer_plugin_string_dup(&ret->version, "0.1.0");
  renderer_plugin_string_dup(&ret->interface_version, "0.1.0");
}
