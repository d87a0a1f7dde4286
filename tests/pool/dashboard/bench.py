#!/usr/bin/python3
"""What the dashboard costs with 12,500 nodes (100,000 GPUs), in headless Chromium (docs/dashboard.md).

poold on 127.0.0.1; dashboard_fleet registers 12,500 agent nodes of 8 GPUs (32 per leaf switch)
and sends each a heartbeat with readings (90% busy); then leases of 64 GPUs by eight owners fill
about 90% of the pool, 100 GPUs are failed and 20 nodes drained, and 20 requests wait. The page is
loaded with an administrator's token and measured by its own figures (window.poolrunPerf): the time
from navigation to the first complete render (after the first frame is painted), and each update's
script time (the JSON parsed, the canvases whose GPUs changed redrawn where on the screen, the
summary and tables rebuilt), and what redrawing every canvas on the screen, or all of them, costs
(as when every reading changed). Also the size and time of
GET /v1/dashboard and, for comparison, GET /v1/nodes. Measures and prints; asserts no time.

  /usr/bin/python3 bench.py --poold B --fleet B --source DIR --out DIR [--nodes 12500]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from support import wait_until  # noqa: E402


def timed_get(url, path, token):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token})
    start = time.time()
    with urllib.request.urlopen(req, timeout=120) as r:
        body = r.read()
    return len(body), time.time() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poold", required=True)
    ap.add_argument("--fleet", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--updates", type=int, default=15)
    args = ap.parse_args()
    chromium, driver = support.need_browser()
    os.makedirs(args.out, exist_ok=True)
    workdir = support.new_workdir("poolrun-dashboard-bench-")
    procs = support.Processes(workdir)
    browser = None
    results = {"nodes": args.nodes}
    try:
        poold = support.Poold(procs, args.poold, workdir, (),
                              ["--heartbeat-interval", "60", "--node-timeout", "86400"])
        topology = os.path.join(args.source, "topologies", "hgx-h100-8gpu-8nic.xml")
        start = time.time()
        subprocess.run([args.fleet, "--pool", poold.url, "--token", support.TOKENS["root"], "--topology", topology,
                        "--nodes", str(args.nodes), "--per-switch", "32", "--busy", "0.9"], check=True)
        owners = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
        leases = int(args.nodes * 0.9) // 8
        for k in range(leases):
            status, body = poold.call("POST", "/v1/leases", {
                "gpus": 64, "gpus_per_node": 8, "owner": owners[k % len(owners)], "job_name": f"train-{k}",
                "ttl_s": 3600, "wait_s": 0, "preemptible": k % 5 == 0})
            assert status == 200, (status, body)
        for k in range(100):
            poold.call("POST", f"/v1/nodes/g{(k * 97) % args.nodes + 1:05d}/gpus/{k % 8}/fail")
        for k in range(20):
            poold.call("POST", f"/v1/nodes/g{(k * 331) % args.nodes + 1:05d}/drain")
        tickets = []
        for k in range(20):
            status, body = poold.call("POST", "/v1/leases", {"gpus": 2048, "owner": owners[k % len(owners)],
                                                            "job_name": f"wait-{k}", "ttl_s": 600, "wait_s": 600})
            assert status in (200, 202), (status, body)
            if status == 202:
                tickets.append(body["ticket"])

        def keep_queued():  # a queued client polls its ticket, or poold drops it after 30 s
            while not done.wait(5):
                for t in tickets:
                    poold.call("GET", f"/v1/queue/{t}")
        done = threading.Event()
        threading.Thread(target=keep_queued, daemon=True).start()
        results["setup_s"] = round(time.time() - start, 1)
        status = poold.get("/v1/status")
        print(f"pool: {status}")

        sizes = [timed_get(poold.url, "/v1/dashboard", support.TOKENS["root"]) for _ in range(5)]
        time.sleep(0.6)  # past poold's half-second snapshot cache
        fresh = []
        for _ in range(3):
            fresh.append(timed_get(poold.url, "/v1/dashboard", support.TOKENS["root"]))
            time.sleep(0.6)
        results["snapshot_bytes"] = sizes[0][0]
        results["snapshot_s_built"] = round(statistics.median(t for _, t in fresh), 3)
        results["snapshot_s_cached"] = round(min(t for _, t in sizes), 3)
        nodes_bytes, nodes_s = timed_get(poold.url, "/v1/nodes", support.TOKENS["root"])
        results["nodes_route_bytes"] = nodes_bytes
        results["nodes_route_s"] = round(nodes_s, 3)

        browser = support.start_browser(procs, chromium, driver, workdir, 1440, 900)
        browser.set_script_timeout(60)
        browser.get(poold.url + "/")
        browser.execute_script("sessionStorage.setItem('poolrun.token', arguments[0])", support.TOKENS["root"])
        firsts = []
        for _ in range(3):
            browser.get(poold.url + "/")
            first, _ = wait_until(lambda: browser.execute_script("return window.poolrunPerf.firstRenderMs"),
                                  "the first render", timeout=60)
            firsts.append(first)
        results["first_render_ms"] = [round(f) for f in firsts]
        wait_until(lambda: len(browser.execute_script("return window.poolrunPerf.updates")) >= args.updates + 1,
                   f"{args.updates} updates", timeout=120, interval=0.5)
        perf = browser.execute_script("return window.poolrunPerf")
        updates = perf["updates"][1:]  # the first is the first render's
        script = sorted(u["scriptMs"] for u in updates)
        results["update_script_ms_median"] = round(statistics.median(script), 1)
        results["update_script_ms_max"] = round(script[-1], 1)
        results["update_fetch_ms_median"] = round(statistics.median(u["fetchMs"] for u in updates), 1)
        results["update_bytes"] = updates[-1]["bytes"]
        results["updates"] = len(updates)
        # Where every reading changed, every canvas on the screen is redrawn each update, and all
        # 391 where the page is scrolled through (the others are drawn as they come into view).
        visible = [browser.execute_script("return window.poolrunPerf.redraw(false)") for _ in range(5)]
        everything = [browser.execute_script("return window.poolrunPerf.redraw(true)") for _ in range(3)]
        results["redraw_visible_ms_median"] = round(statistics.median(visible), 1)
        results["redraw_all_ms_median"] = round(statistics.median(everything), 1)
        browser.save_screenshot(os.path.join(args.out, "bench-100k.png"))
        with open(os.path.join(args.out, "bench.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(json.dumps(results, indent=1))
        done.set()
    finally:
        if browser is not None:
            try:
                browser.quit()
            except Exception as e:
                print(f"(closing the browser: {e})")
        procs.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
