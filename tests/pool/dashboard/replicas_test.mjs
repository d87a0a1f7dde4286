// The dashboard after a failover (pool/dashboard/ui/replicas.js), in Node.js: which replicas the page names
// when its poold stops answering as the leader, and when it says so. Run by ctest
// (pool_dashboard_replicas): node replicas_test.mjs PATH/TO/replicas.js. Exit 0 when every check
// holds, 1 naming the first that does not.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const source = readFileSync(process.argv[2], 'utf8');
const { otherReplicas, leaderGone, strandedMessage } =
  await import('data:text/javascript,' + encodeURIComponent(source));

const doc = {
  store: 'etcd://e1:2379 (prefix /poolrun)',
  replicas: [
    { url: 'http://a:7450', leader: true },
    { url: 'http://b:7450', leader: false },
    { url: 'http://b:7450/', leader: false },
    { url: 'javascript:alert(1)', leader: false },
    { url: 'not a url', leader: false },
    { url: 42 },
    null,
    { url: 'https://c.example:7450/path?x', leader: false },
  ],
};
// This page's origin is left out, each replica named once, and only http(s) origins kept.
assert.deepEqual(otherReplicas(doc, 'http://a:7450'), ['http://b:7450', 'https://c.example:7450']);
assert.deepEqual(otherReplicas({ error: 'x' }, 'http://a:7450'), []);
assert.deepEqual(otherReplicas(null, 'http://a:7450'), []);

// A poold gone (no answer: fetch fails, or a standby's redirect goes to another origin), or one that
// says it does not lead; not a refusal of the request itself.
assert.equal(leaderGone(0, ''), true);
assert.equal(leaderGone(503, 'not_leader'), true);
assert.equal(leaderGone(503, 'no_leader'), true);
assert.equal(leaderGone(503, 'etcd_unavailable'), true);
assert.equal(leaderGone(503, 'stopping'), false);
assert.equal(leaderGone(401, ''), false);
assert.equal(leaderGone(500, 'not_leader'), false);

// The message names this page's poold, why, and what to do; the links are the replicas.
const m = strandedMessage('http://a:7450', 'cannot reach poold (Failed to fetch)', ['http://b:7450']);
assert.match(m.text, /^The poold at http:\/\/a:7450 does not answer as the pool's leader \(cannot reach poold/);
assert.match(m.text, /open one \(a standby sends you on to the leader\) and sign in there again/);
assert.deepEqual(m.links, ['http://b:7450']);
// One poold (no replicas): nothing to name, the page's usual message stands.
assert.equal(strandedMessage('http://a:7450', 'x', []), null);
console.log('replicas.js: every check holds');
