#!/usr/bin/python3
"""The dashboard in a real headless browser (docs/dashboard.md).

poold on 127.0.0.1 with four poold-agents (n01 and n02 under leaf1, n03 and n04 under leaf2), each
with its own fake NVML file, heartbeats every second and a node timeout of 3 s. The test signs in
as the administrator, checks that the page shows what poold says (GPUs by state, a lease's owner
and GPUs, queue positions, a GPU's details on hover), changes the pool (an acquire, an ECC error
that fails a GPU, a killed agent, queued requests) and sees the page follow within 2 s of poold,
drains a node and releases a lease from the page, then signs in as a user, whose drain poold
refuses and the page says so, and with a bad token. Screenshots go to --out.

  /usr/bin/python3 browser_test.py --poold B --agent B --fake-nvml-dir D --source DIR --out DIR
"""

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from support import wait_until  # noqa: E402

NODES = {"n01": "leaf1", "n02": "leaf1", "n03": "leaf2", "n04": "leaf2"}
FOLLOW_S = 2.0  # the page shows a change of poold within this


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poold", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--fake-nvml-dir", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    def scenario(procs, workdir, open_browser):
        pool = DashboardPool(procs, args, workdir)
        Scenario(pool, open_browser(), args.out).run()

    support.run_with_browser("poolrun-dashboard-", args.out, scenario)


class DashboardPool:
    """poold and its four agents; the fake NVML files the test changes."""

    def __init__(self, procs, args, workdir):
        self.procs = procs
        self.args = args
        self.workdir = workdir
        self.topology = os.path.join(args.source, "topologies", "hgx-h100-8gpu-8nic.xml")
        self.pcis = support.gpu_pci_addresses(self.topology)
        self.poold = support.Poold(procs, args.poold, workdir, NODES,
                                   ["--heartbeat-interval", "1", "--node-timeout", "3", "--history-interval", "1"])
        self.nvml = {}
        self.agents = {}
        for n, (util, temp) in zip(NODES, [(85, 71), (40, 55), (0, 34), (10, 40)]):
            self.nvml[n] = support.fake_nvml(self.pcis, util, temp, memory_used_gib=60 if util else 1)
            self.write_nvml(n)
            support.write_whole(os.path.join(workdir, f"token-{n}"), f"tok-node-{n}-0123456789\n")
            os.makedirs(os.path.join(workdir, f"proc-{n}"), exist_ok=True)
            self.start_agent(n)
        wait_until(lambda: all(x["state"] == "up" and x["last_heartbeat"] for x in self.poold.get("/v1/nodes"))
                   and len(self.poold.get("/v1/nodes")) == 4, "four agent nodes up", timeout=30)

    def write_nvml(self, node):
        support.write_whole(os.path.join(self.workdir, f"nvml-{node}.json"), json.dumps(self.nvml[node]))

    def start_agent(self, node):
        env = dict(os.environ, LD_LIBRARY_PATH=self.args.fake_nvml_dir,
                   POOLRUN_FAKE_NVML=os.path.join(self.workdir, f"nvml-{node}.json"))
        self.agents[node] = self.procs.start(
            [self.args.agent, "--pool", self.poold.url, "--token-file", os.path.join(self.workdir, f"token-{node}"),
             "--node", node, "--interval", "1", "--from", self.topology, "--switch", NODES[node],
             "--proc-root", os.path.join(self.workdir, f"proc-{node}")],
            os.path.join(self.workdir, f"agent-{node}.log"), env=env)


class Scenario:
    def __init__(self, pool, browser, out):
        self.pool = pool
        self.api = pool.poold
        self.b = browser
        self.out = out
        self.follow = {}  # what changed -> seconds from poold showing it to the page showing it
        self.keep_polling = []
        self.stop = threading.Event()

    # ---- what the page shows ----

    def count(self, name):
        return int(self.b.execute_script(
            "const e = document.querySelector(`#summary [data-count='${arguments[0]}'] b`);"
            "return e ? e.textContent : null;", name) or -1)

    def node_count(self, state):
        text = self.b.execute_script(
            "const e = document.querySelector(`#summary [data-count='nodes-${arguments[0]}']`);"
            "return e ? e.textContent : ' 0';", state)
        return int(text.split()[0])

    def page_counts(self):
        return {s: max(0, self.count(s)) for s in ("free", "leased", "failed", "foreign", "unreachable-gpus")}

    def api_counts(self):
        g = self.api.get("/v1/status")["gpus"]
        return {"free": g["free"], "leased": g["leased"], "failed": g["failed"], "foreign": g["foreign"],
                "unreachable-gpus": g["unreachable"]}

    def lease_row(self, lease_id):
        return self.b.execute_script(
            "const r = document.querySelector(`#leases tr[data-lease='${arguments[0]}']`);"
            "if (!r) return null; const f = (n) => r.querySelector(`[data-field='${n}']`).textContent;"
            "return {owner: f('owner'), gpus: f('gpus'), nodes: f('nodes')};", lease_id)

    def queue_rows(self):
        return self.b.execute_script(
            "return [...document.querySelectorAll('#queue tbody tr')].map((r) => ({ticket: +r.dataset.ticket,"
            " position: +r.querySelector(`[data-field='position']`).textContent,"
            " owner: r.querySelector(`[data-field='owner']`).textContent}));")

    def details(self):
        return self.b.execute_script(
            "const o = {}; for (const d of document.querySelectorAll('#details dd')) o[d.dataset.field] = d.textContent;"
            "return o;")

    def status_text(self):
        return self.b.execute_script("return document.getElementById('action-status').textContent;")

    def shot(self, name):
        path = os.path.join(self.out, f"{name}.png")
        self.b.save_screenshot(path)
        return path

    def page_follows(self, what, check):
        """Waits for the page to satisfy `check` once poold does; records and bounds the delay."""
        _, waited = wait_until(check, f"the page shows {what}", timeout=10)
        self.follow[what] = waited
        assert waited <= FOLLOW_S, f"the page showed {what} {waited:.2f} s after poold (more than {FOLLOW_S} s)"

    def counts_match(self):
        want = self.api_counts()
        got = self.page_counts()
        return got == want and got

    def click_button(self, container_css, text):
        """Clicks the button of `container_css` whose label starts with `text`. The page draws its
        panels again at each refresh: a button found just before one is gone by the click (Selenium's
        StaleElementReferenceException), and is looked for again in the new panel, as a user's next
        click would find it (at most 5 tries)."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By
        for _ in range(5):
            try:
                for b in self.b.find_elements(By.CSS_SELECTOR, f"{container_css} button"):
                    if b.text.startswith(text):
                        b.click()
                        return
                break
            except StaleElementReferenceException:
                time.sleep(0.1)
        raise AssertionError(f"no button '{text}' in {container_css}")

    def confirm(self):
        wait_until(lambda: self.b.execute_script("return document.getElementById('confirm').open"), "the confirmation")
        self.b.find_element("id", "confirm-ok").click()

    def sign_in(self, who_token):
        self.b.get(self.api.url + "/")
        box = wait_until(lambda: self.b.find_element("id", "token"), "the sign-in form")[0]
        box.send_keys(who_token + "\n")

    def find(self, target):
        box = self.b.find_element("id", "find")
        box.clear()
        box.send_keys(target + "\n")

    # ---- the scenario ----

    def run(self):
        api = self.api
        self.sign_in(support.TOKENS["root"])
        wait_until(lambda: self.count("gpus") == 32, "32 GPUs on the page")
        wait_until(self.counts_match, "the page's counts by state match poold's")
        assert self.page_counts()["free"] == 32

        # A lease: its row names its owner and GPUs as poold does.
        status, body = api.call("POST", "/v1/leases", {"gpus": 8, "gpus_per_node": 4, "job_name": "train",
                                                        "ttl_s": 600, "wait_s": 0}, who="alice")
        assert status == 200, body
        lease = body["lease"]
        self.page_follows("alice's lease", lambda: self.lease_row(lease["id"]))
        row = self.lease_row(lease["id"])
        nodes = {}
        for g in lease["gpus"]:
            nodes.setdefault(g["node"], []).append(g["index"])
        assert row["owner"] == "alice" and row["gpus"] == "8", row
        for node, idx in nodes.items():
            assert node + ":" in row["nodes"], (row, nodes)
        self.page_follows("8 GPUs leased", self.counts_match)

        # Hovering one of its GPUs shows the lease, its owner and the GPU's readings.
        # The pointer moved in the viewport's coordinates (the page may be taller than the window).
        from selenium.webdriver.common.actions.action_builder import ActionBuilder
        first = lease["gpus"][0]
        point = self.b.execute_script("return window.poolrunGpuPoint(arguments[0], arguments[1])",
                                      first["node"], first["index"])
        move = ActionBuilder(self.b)
        move.pointer_action.move_to_location(0, 0)
        move.pointer_action.move_to_location(int(point["x"]), int(point["y"]))
        move.perform()
        d, _ = wait_until(lambda: self.details().get("lease") == lease["id"] and self.details(), "hover details")
        assert d["owner"] == "alice" and d["gpu"] == f"{first['node']}:{first['index']}", d
        want_util = self.pool.nvml[first["node"]]["gpus"][first["index"]]["utilization"]["gpu"]
        wait_until(lambda: self.details().get("utilisation") == f"{want_util}%", "the GPU's utilisation on hover")
        assert "60.0 / 80.0 GiB" in d["memory"] or "1.0 / 80.0 GiB" in d["memory"], d
        assert d["temperature"].endswith("°C"), d
        self.shot("01-overview-hover")

        # An acquire by bob.
        status, body = api.call("POST", "/v1/leases", {"gpus": 4, "job_name": "eval", "ttl_s": 600, "wait_s": 0},
                                who="bob")
        assert status == 200, body
        bob_lease = body["lease"]["id"]
        self.page_follows("bob's acquire", lambda: self.counts_match() and self.lease_row(bob_lease))

        # An uncorrectable ECC error on n03:5 fails it: its details say why.
        self.pool.nvml["n03"]["gpus"][5]["ecc_uncorrected_volatile"] = 3
        self.pool.write_nvml("n03")
        wait_until(lambda: api.get("/v1/status")["gpus"]["failed"] == 1, "poold failing n03:5", timeout=15)
        self.page_follows("n03:5 failed", lambda: self.count("failed") == 1 and self.counts_match())
        self.find("n03:5")
        d, _ = wait_until(lambda: self.details().get("gpu") == "n03:5" and self.details(), "n03:5's details")
        assert d["state"] == "failed", d
        assert "uncorrectable ECC" in d.get("why-failed", ""), d
        # Without a mouse: the switch's grid takes the focus, arrows move through n03 into n04.
        from selenium.webdriver.common.keys import Keys
        grid = self.b.find_element("css selector", "canvas[data-switch='leaf2']")
        grid.send_keys(Keys.ARROW_RIGHT)
        wait_until(lambda: self.details().get("gpu") == "n03:6", "n03:6 by the keyboard")
        grid.send_keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)
        d, _ = wait_until(lambda: self.details().get("gpu") == "n04:0" and self.details(), "n04:0 by the keyboard")
        assert d["state"] == "free" and d["node"] == "up", d
        assert "Arrow keys" in grid.get_attribute("aria-label"), grid.get_attribute("aria-label")

        # Queued requests: positions and owners as poold's queue has them.
        for who, gpus in (("bob", 20), ("alice", 22)):
            status, body = api.call("POST", "/v1/leases", {"gpus": gpus, "job_name": f"wait-{who}", "ttl_s": 600,
                                                            "wait_s": 600}, who=who)
            if status == 200:  # started at once (the pool had room): not a queue entry
                raise AssertionError(f"{who}'s request for {gpus} GPUs was expected to wait: {body}")
            assert status == 202, body
            self.keep_polling.append((who, body["ticket"]))
        poller = threading.Thread(target=self.poll_tickets, daemon=True)
        poller.start()
        want = [{"ticket": q["ticket"], "position": q["position"], "owner": q["owner"]} for q in api.get("/v1/queue")]
        assert [q["owner"] for q in want] == ["bob", "alice"], want
        self.page_follows("the queue", lambda: self.queue_rows() == want)
        # poold samples its history every second here (--history-interval 1): the chart follows.
        wait_until(lambda: "2 requests waiting now" in self.b.find_element("id", "cap-queue").text,
                   "the queue's history chart", timeout=5)

        # A killed agent: its node goes unreachable, and its 8 GPUs with it.
        self.pool.procs.stop(self.pool.agents["n04"], sig=9)
        wait_until(lambda: api.get("/v1/status")["nodes"]["unreachable"] == 1, "poold calling n04 unreachable",
                   timeout=15)
        self.page_follows("n04 unreachable", lambda: self.node_count("unreachable") == 1
                          and self.count("unreachable-gpus") == 8)
        self.shot("02-failed-unreachable-queued")

        # An administrator's drain from the page, confirmed; then a release from the leases table.
        self.find("n02")
        wait_until(lambda: self.details().get("gpu") == "n02:0", "n02's details")
        self.click_button("#details", "Drain n02")
        self.confirm()
        wait_until(lambda: next(n for n in api.get("/v1/nodes") if n["name"] == "n02")["state"] == "draining",
                   "poold draining n02")
        self.page_follows("n02 draining", lambda: self.node_count("draining") == 1)
        wait_until(lambda: "drained n02" in self.status_text(), "the page saying it drained n02")
        self.click_button(f"#leases tr[data-lease='{bob_lease}']", "Release")
        self.confirm()
        wait_until(lambda: all(l["id"] != bob_lease for l in api.get("/v1/leases")), "poold releasing bob's lease")
        self.page_follows("bob's lease released", lambda: self.lease_row(bob_lease) is None)
        # The usage ledger's view: alice and bob by owner, as poold reports them, and by node.
        def usage_rows():
            return self.b.execute_script(
                "return [...document.querySelectorAll('#usage tbody tr')].map(r => r.dataset.name)")
        wait_until(lambda: {"alice", "bob"} <= set(usage_rows()), "alice and bob in the usage view",
                   timeout=15)
        report = api.get("/v1/usage?by=owner")
        assert {r["name"] for r in report["rows"]} == {"alice", "bob"}, report
        bar = self.b.find_element("css selector", "#usage tr[data-name='alice'] .usage-bar")
        assert "GPU-hours held" in bar.get_attribute("aria-label"), bar.get_attribute("aria-label")
        self.b.find_element("id", "usage-by").send_keys("n")  # by node, with the keyboard
        wait_until(lambda: set(usage_rows()) and set(usage_rows()) <= {"n01", "n02", "n03", "n04"},
                   "the usage view by node")
        # Every GPU of a node failed from the page (n03 has one failed already, by its ECC errors).
        self.find("n03")
        wait_until(lambda: self.details().get("gpu") == "n03:0", "n03's details")
        self.click_button("#details", "Fail node n03")
        self.confirm()
        wait_until(lambda: all(g["state"] == "failed"
                               for g in next(n for n in api.get("/v1/nodes") if n["name"] == "n03")["gpus"]),
                   "poold failing every GPU of n03")
        self.page_follows("n03 failed", lambda: self.count("failed") == 8)
        self.b.find_element("id", "colour").send_keys("u")  # colour by utilisation, with the keyboard
        self.shot("03-admin-drained-utilisation")
        perf = self.b.execute_script("return window.poolrunPerf")
        errors = [e["message"] for e in self.b.get_log("browser") if e.get("source") == "javascript"]
        assert not errors, f"the page's script failed: {errors}"

        # A user: sees everything, may release only their own leases, and poold refuses the drain.
        self.b.find_element("id", "signout").click()
        self.sign_in(support.TOKENS["alice"])
        wait_until(lambda: self.b.find_element("id", "who").text == "alice (user)", "alice signed in")
        wait_until(lambda: self.lease_row(lease["id"]), "alice's lease")
        others = [l for l in api.get("/v1/leases") if l["owner"] != "alice"]
        for l in others:
            assert not self.b.execute_script(
                "return !!document.querySelector(`#leases tr[data-lease='${arguments[0]}'] button`)", l["id"]), l
        self.find("n01")
        wait_until(lambda: self.details().get("gpu") == "n01:0", "n01's details for alice")
        self.click_button("#details", "Drain n01")
        self.confirm()
        text, _ = wait_until(lambda: "refused (403)" in self.status_text() and self.status_text(), "the refusal")
        assert "alice" in text and "administrator" in text, text
        assert next(n for n in api.get("/v1/nodes") if n["name"] == "n01")["state"] == "up"
        self.shot("04-user-refused")

        # A bad token: back to the sign-in, with poold's reason.
        self.b.find_element("id", "signout").click()
        self.sign_in("tok-nobody-0123456789")
        err, _ = wait_until(lambda: self.b.find_element("id", "error").text, "the refused token")
        assert "not in poold's token file" in err, err
        assert self.b.find_element("id", "signin").is_displayed()
        self.shot("05-bad-token")
        self.stop.set()

        print("the page followed poold within: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.follow.items()))
        updates = [u["scriptMs"] for u in perf["updates"]]
        print(f"first render {perf['firstRenderMs']:.0f} ms after navigation (32 GPUs); script time per update "
              f"median {sorted(updates)[len(updates) // 2]:.1f} ms over {len(updates)} updates")

    def poll_tickets(self):
        # A queued client polls its ticket, or poold drops it after 30 s.
        while not self.stop.wait(2):
            for who, ticket in self.keep_polling:
                self.api.call("GET", f"/v1/queue/{ticket}", who=who)


if __name__ == "__main__":
    main()
