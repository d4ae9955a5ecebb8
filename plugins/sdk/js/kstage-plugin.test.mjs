// Unit tests of kstage-plugin.js in plain Node: `node --test plugins/sdk/js/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import * as kp from './kstage-plugin.js';

const POD = JSON.stringify({
  metadata: {
    name: 'web-0', namespace: 'default',
    labels: { app: 'web', 'app.kubernetes.io/name': 'shop', n: 3 },
    annotations: { 'kstage.dev/x': 'y' },
  },
  spec: { nodeName: null, containers: [{ name: 'c0', ports: [{ containerPort: 8080 }] }] },
});

test('paths', () => {
  const obj = kp.parseObject(POD);
  assert.equal(obj.get('metadata.labels.app'), 'web');
  assert.equal(obj.get('metadata.labels["app.kubernetes.io/name"]'), 'shop');
  assert.equal(obj.get("['metadata'].name"), 'web-0');
  assert.equal(obj.get('spec.containers[0].ports[0].containerPort'), 8080);
  assert.equal(obj.get('spec.nodeName'), null);
  for (const path of ['status.phase', 'spec.containers[1]', 'spec.containers.0', 'metadata.toString']) {
    assert.equal(obj.get(path), kp.MISSING, path);
  }
  for (const path of ['', 'a..b', 'a.', 'a["b', 'a[x]', '.a']) {
    assert.throws(() => obj.get(path), (e) => typeof e === 'string' && e.startsWith('invalid path'), path);
  }
  assert.throws(() => kp.parseObject('{'), (e) => e.startsWith('object is not JSON'));
});

test('metadata', () => {
  const obj = kp.parseObject(POD);
  assert.equal(obj.name, 'web-0');
  assert.equal(obj.namespace, 'default');
  assert.equal(obj.label('app'), 'web');
  assert.equal(obj.label('n'), undefined);
  assert.equal(obj.annotation('kstage.dev/x'), 'y');
  assert.deepEqual(obj.labels(), { app: 'web', 'app.kubernetes.io/name': 'shop' });
  assert.deepEqual(kp.parseObject('[]').annotations(), {});
});

test('candidates and answers', () => {
  const cs = [{ name: 'a', weight: 0n }, { name: 'b', weight: 2n }, { name: 'c', weight: 3n }];
  assert.equal(kp.totalWeight(cs), 5n);
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((p) => kp.weighted(cs, BigInt(p)).name), ['b', 'b', 'c', 'c', 'c', 'b']);
  assert.equal(kp.weighted([{ name: 'x', weight: 0n }, { name: 'y', weight: 0n }], 3n).name, 'y');
  assert.equal(kp.find(cs, 'c'), cs[2]);
  assert.deepEqual(kp.selection(cs[1], 5), { stage: 'b', delayMs: 5n });
  assert.deepEqual(kp.selection('a'), { stage: 'a', delayMs: undefined });
  assert.deepEqual(kp.retryAfter(10), { tag: 'retry-after', val: 10n });
  assert.deepEqual(kp.drop(true), { tag: 'drop', val: true });
  assert.deepEqual(kp.info('x', '1'), { name: 'x', version: '1', interfaceVersion: '0.1.0' });
});
