// {{name}}: a kstage selector plugin written in C.
//
// Plays the heaviest candidate Stage (the first of equal weights) instead of kstage's
// weighted random choice, and lets no Stage wait longer than MAX_DELAY_MS.
//
// Memory: the arguments are the plugin's to free; the answer's strings are freed by
// the bindings after kstage has read them, so they are heap copies.

#include <stdint.h>

#include "selector_plugin.h"

enum { MAX_DELAY_MS = 1000 }; // the longest a chosen Stage may wait

bool exports_kstage_plugin_selector_select(
    exports_kstage_plugin_selector_json_t *object,
    exports_kstage_plugin_selector_list_candidate_t *candidates,
    exports_kstage_plugin_selector_option_selection_t *ret, selector_plugin_string_t *err) {
  (void)err; // this plugin never fails: `return false` with *err set would.
  // The object is JSON text (object->ptr, object->len); this plugin does not read it.
  ret->is_some = false;
  const kstage_plugin_types_candidate_t *heaviest = NULL;
  for (size_t i = 0; i < candidates->len; i++) {
    const kstage_plugin_types_candidate_t *c = &candidates->ptr[i];
    if (heaviest == NULL || c->weight > heaviest->weight)
      heaviest = c;
  }
  if (heaviest != NULL) {
    ret->is_some = true;
    selector_plugin_string_dup_n(&ret->val.stage, (const char *)heaviest->name.ptr,
                                 heaviest->name.len);
    // Not set: kstage keeps the delay it drew.
    ret->val.delay_ms.is_some = heaviest->delay_ms.is_some && heaviest->delay_ms.val > MAX_DELAY_MS;
    ret->val.delay_ms.val = MAX_DELAY_MS;
  }
  exports_kstage_plugin_selector_json_free(object);
  exports_kstage_plugin_selector_list_candidate_free(candidates);
  return true;
}

void exports_kstage_plugin_metadata_info(exports_kstage_plugin_metadata_plugin_info_t *ret) {
  selector_plugin_string_dup(&ret->name, "{{name}}");
  selector_plugin_string_dup(&ret->version, "0.1.0");
  selector_plugin_string_dup(&ret->interface_version, "0.1.0");
}
