// {{name}}: a kstage renderer plugin written in JavaScript.
//
// A Stage's template is JSON in which `${stage}` becomes the name of the Stage being
// played and `${now}` kstage's current time; the rest is sent as written (kstage checks
// that the result is JSON).

import { now } from 'kstage:plugin/host@0.1.0';
import { info } from './sdk/js/kstage-plugin.js';

export const metadata = {
  info() {
    return info('{{name}}', '0.1.0');
  },
};

export const renderer = {
  // A thrown string is the `err` answer.
  render(stage, template, object) {
    // The object is at hand: `parseObject(object).get('metadata.name')` (from the SDK).
    let json = template.replaceAll('${stage}', stage);
    if (json.includes('${now}')) json = json.replaceAll('${now}', now());
    return json;
  },
};
