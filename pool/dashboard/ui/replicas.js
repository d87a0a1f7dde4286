// Where the dashboard sends its user when the poold it was opened from stops answering as the
// pool's leader (replicas on etcd, docs/ha.md): the other replicas, as the leader listed them in
// GET /v1/replicas while it answered. The page cannot ask another origin itself (its policy allows
// only its own, and a standby's redirect to the leader is another origin), nor carry the token
// there (a tab's session storage is its origin's): it names the replicas to open. A standby opened
// redirects to the leader, where the user signs in again. No DOM here: tests run it in Node.js.

// The http(s) URLs of the replicas in `doc` (GET /v1/replicas) other than `origin` (this page's),
// each once, as origins ("http://b:7450"). Anything else a reply may hold is dropped: the page
// makes links of these.
export function otherReplicas(doc, origin) {
  const out = [];
  const list = doc && Array.isArray(doc.replicas) ? doc.replicas : [];
  for (const r of list) {
    let url;
    try {
      url = new URL(r && typeof r.url === 'string' ? r.url : '');
    } catch (e) {
      continue;
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') continue;
    if (url.origin === origin || out.includes(url.origin)) continue;
    out.push(url.origin);
  }
  return out;
}

// Whether a failed request means this poold no longer serves as the leader: no answer (it is gone,
// or a standby now and its redirect went to another origin), or a 503 that says it does not lead.
export function leaderGone(status, reason) {
  return status === 0 || (status === 503 && ['not_leader', 'no_leader', 'etcd_unavailable'].includes(reason));
}

// What the page says then: {text, links}, the links to show after the text.
export function strandedMessage(origin, why, replicas) {
  if (!replicas.length) return null;
  return {
    text: `The poold at ${origin} does not answer as the pool's leader (${why}). The pool has other ` +
      `replicas: open one (a standby sends you on to the leader) and sign in there again with your ` +
      `token; this page keeps trying ${origin} meanwhile.`,
    links: replicas,
  };
}
