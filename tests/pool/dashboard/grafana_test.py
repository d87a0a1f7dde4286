#!/usr/bin/python3
"""dashboards/grafana-poolrun.json against poold (docs/operations.md): every PromQL expression of
its panels and variables names only metrics that poold's /metrics exports (the families of a real
poold's `# TYPE` lines, a histogram's _bucket, _sum and _count included), every panel has a query,
and, where promtool is installed, every expression parses (`promtool check rules` on a rules file
made of them, the dashboard's variables replaced by values).

  python3 grafana_test.py --poold B --dashboard FILE
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
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

    exprs = expressions(dashboard)
    assert len(exprs) >= 20, f"only {len(exprs)} queries in {args.dashboard}"
    workdir = support.new_workdir("poolrun-grafana-")
    try:
        check(args, exprs, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def check(args, exprs, workdir):
    procs = support.Processes(workdir)
    try:
        poold = support.Poold(procs, args.poold, workdir)
        names = exported(poold.url, support.TOKENS["root"])
    finally:
        procs.close()
    assert "poolrun_gpu_utilization_ratio" in names and "poolrun_queue_wait_seconds_bucket" in names, sorted(names)

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
