#!/usr/bin/python3
"""dashboards/grafana-poolrun.json against poold (docs/operations.md): every PromQL expression of
its panels and variables names only metrics that poold's /metrics exports (the families of a real
poold's `# TYPE` lines, a histogram's _bucket, _sum and _count included: a poold with quotas, and,
where etcd is installed, a replica on etcd for the leader's families), every panel has a query,
every panel, query and variable takes its data source from the DS_PROMETHEUS input (what Grafana
asks for on import) and names no variable the dashboard lacks, there are panels of the quotas,
preemptions, MIG and MPS and the replicas, and, where promtool is installed, every expression parses
(`promtool check rules` on a rules file made of them, the dashboard's variables replaced by values).

  python3 grafana_test.py --poold B --dashboard FILE
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

# PromQL's words that are not metric names: aggregations, functions, keywords.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless",
    "sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile", "stddev", "stdvar", "count_values", "group",
    "rate", "irate", "increase", "delta", "idelta", "histogram_quantile", "abs", "clamp_min", "clamp_max",
    "label_values", "time", "vector", "scalar", "absent", "changes", "resets", "deriv", "predict_linear",
    "avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "count_over_time", "inf", "nan",
}


def metric_names(expr):
    """The metric names an expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)      # label values and strings
    text = re.sub(r"\{[^}]*\}", "", text)                 # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        rest = text[m.end():].lstrip()
        if word in KEYWORDS or rest.startswith("("):
            continue
        names.add(word)
    return names


def expressions(dashboard):
    """(where, expr) of every panel's query and every query variable."""
    out = []
    for p in dashboard["panels"]:
        for t in p.get("targets", []):
            out.append((f"panel '{p['title']}' {t['refId']}", t["expr"]))
        if p["type"] != "row" and not p.get("targets"):
            raise AssertionError(f"panel '{p['title']}' has no query")
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", q)
            out.append((f"variable '{v['name']}'", inner.group(1) if inner else q))
    return out


# Grafana's own variables, which a dashboard uses without defining them.
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}

# What the dashboard must show beyond the pool's GPUs: (what, a metric one of its panels queries).
REQUIRED_PANELS = [
    ("quotas", "poolrun_quota_used_gpus"), ("borrowed GPUs", "poolrun_quota_borrowed_gpus"),
    ("preemptions", "poolrun_leases_preempted_total"), ("MIG", "poolrun_mig_instances"),
    ("MPS", "poolrun_mps_shares"), ("the replicas", "poolrun_leader"),
]


def data_sources(dashboard):
    """Problems with the data sources: every panel, query and query variable must take the one the
    DS_PROMETHEUS input names, and every $variable must be one the dashboard defines."""
    problems = []
    inputs = {i["name"] for i in dashboard.get("__inputs", []) if i.get("type") == "datasource"}
    if inputs != {"DS_PROMETHEUS"}:
        problems.append(f"__inputs declare data sources {sorted(inputs)}, not DS_PROMETHEUS alone")
    wanted = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    for p in dashboard["panels"]:
        if p["type"] == "row":
            continue
        if p.get("datasource") != wanted:
            problems.append(f"panel '{p['title']}' takes data source {p.get('datasource')}, not {wanted}")
        for t in p.get("targets", []):
            if t.get("datasource") != wanted:
                problems.append(f"panel '{p['title']}' {t['refId']} takes data source {t.get('datasource')}")
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query" and v.get("datasource") != wanted:
            problems.append(f"variable '{v['name']}' takes data source {v.get('datasource')}, not {wanted}")
    text = json.dumps(dashboard)
    for name in sorted(set(re.findall(r"\$\{?(\w+)", text))):
        if name not in defined | inputs | GRAFANA_VARIABLES:
            problems.append(f"${name} is used but is no variable or input of the dashboard")
    return problems


def exported(url, token):
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) in ("histogram", "summary"):
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    return names


def concrete(expr):
    return expr.replace("$__rate_interval", "5m").replace("$job", "poold").replace("$node", ".*")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poold", required=True)
    ap.add_argument("--dashboard", required=True)
    args = ap.parse_args()
    with open(args.dashboard) as f:
        dashboard = json.load(f)

    # The extractor itself, on expressions whose names are known.
    assert metric_names('sum by (node) (rate(a_total{x="y(z)"}[5m])) / on(node) b') == {"a_total", "b"}
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(c_bucket{job="$job"}[$__rate_interval])))') == {"c_bucket"}

    # The checks themselves, on a dashboard made wrong.
    broken = {"__inputs": [{"name": "DS_PROMETHEUS", "type": "datasource"}], "templating": {"list": []},
              "panels": [{"type": "stat", "title": "t", "datasource": {"type": "prometheus", "uid": "${datasource}"},
                          "targets": []}]}
    assert len(data_sources(broken)) == 2, data_sources(broken)

    problems = data_sources(dashboard)
    assert not problems, "\n".join(problems)
    exprs = expressions(dashboard)
    assert len(exprs) >= 20, f"only {len(exprs)} queries in {args.dashboard}"
    workdir = support.new_workdir("poolrun-grafana-")
    try:
        check(args, exprs, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def replica_names(args, workdir):
    """The families of a poold replica on a one-member etcd, or None where etcd is not installed."""
    etcd = shutil.which("etcd")
    if not etcd:
        return None
    procs = support.Processes(workdir)
    try:
        client, peer, api = support.free_port(), support.free_port(), support.free_port()
        procs.start([etcd, "--name", "e1", "--data-dir", os.path.join(workdir, "etcd"),
                     "--listen-client-urls", f"http://127.0.0.1:{client}",
                     "--advertise-client-urls", f"http://127.0.0.1:{client}",
                     "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-cluster", f"e1=http://127.0.0.1:{peer}"], os.path.join(workdir, "etcd.log"))
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=2) as r:
                    if b"true" in r.read():
                        break
            except (urllib.error.URLError, OSError):
                pass
            assert time.time() < deadline, "etcd did not become healthy within 30 s: " + open(
                os.path.join(workdir, "etcd.log")).read()[-2000:]
            time.sleep(0.1)
        poold_dir = os.path.join(workdir, "replica")
        os.makedirs(poold_dir)
        poold = support.Poold(procs, args.poold, poold_dir, extra=[
            "--store", f"etcd://127.0.0.1:{client}", "--advertise", f"http://127.0.0.1:{api}"])
        deadline = time.time() + 30
        while True:  # until it leads (a standby may redirect /metrics, or not yet serve it)
            try:
                names = exported(poold.url, support.TOKENS["root"])
                if "poolrun_leader" in names:
                    return names
            except (urllib.error.URLError, OSError):
                pass
            assert time.time() < deadline, "the replica on etcd did not lead within 30 s: " + open(
                poold.proc.log).read()[-2000:]
            time.sleep(0.2)
    finally:
        procs.close()


def check(args, exprs, workdir):
    procs = support.Processes(workdir)
    try:
        quotas = os.path.join(workdir, "quotas")
        support.write_whole(quotas, "group vision guaranteed=1 limit=2 members=alice\ndefault guaranteed=0 limit=1\n")
        poold = support.Poold(procs, args.poold, workdir, extra=["--quotas", quotas])
        names = exported(poold.url, support.TOKENS["root"])
    finally:
        procs.close()
    assert "poolrun_gpu_utilization_ratio" in names and "poolrun_queue_wait_seconds_bucket" in names, sorted(names)
    assert "poolrun_quota_used_gpus" in names, sorted(names)
    replica = replica_names(args, workdir)
    if replica is None:
        # Without etcd the leader's families cannot be seen: they are taken as the docs list them.
        print("etcd not installed (Debian's etcd-server package): the replica panels' metrics were not checked")
        names |= {"poolrun_leader", "poolrun_leader_since_seconds", "poolrun_leader_elections_total"}
    else:
        names |= replica

    unknown = []
    used = set()
    for where, expr in exprs:
        found = metric_names(expr)
        if not found:
            unknown.append(f"{where}: names no metric: {expr}")
        used |= found
        for name in sorted(found - names):
            unknown.append(f"{where}: '{name}' is not a metric of poold's /metrics ({expr})")
    assert not unknown, "\n".join(unknown)
    missing = [f"{what} ({metric})" for what, metric in REQUIRED_PANELS if metric not in used]
    assert not missing, "no panel shows " + ", ".join(missing)

    promtool = shutil.which("promtool")
    if promtool:
        rules = {"groups": [{"name": "grafana-poolrun", "rules": [
            {"record": f"dashboard:query_{i}", "expr": concrete(e)} for i, (_, e) in enumerate(exprs)]}]}
        path = os.path.join(workdir, "rules.json")  # JSON is YAML
        with open(path, "w") as f:
            json.dump(rules, f)
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        assert r.returncode == 0, f"promtool check rules: {r.stdout}{r.stderr}"
        print(f"promtool: {len(exprs)} expressions parse")
    else:
        print("promtool not installed (Debian's prometheus package): the expressions' syntax was not checked")
    print(f"PASS: {len(exprs)} queries name {len(used)} metrics, all of them poold's")


if __name__ == "__main__":
    main()
