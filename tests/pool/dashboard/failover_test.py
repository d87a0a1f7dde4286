#!/usr/bin/python3
"""The dashboard across a failover, in a real headless browser (docs/dashboard.md, docs/ha.md).

Two poold replicas on a one-member etcd on 127.0.0.1 (--etcd-ttl 2). The test signs in on the
leader's page, kills the leader (SIGKILL) and expects the page to say that its poold does not
answer as the leader and to name the other replica as a link; the link opens the replica that leads
now, whose page asks for the token again (a tab's storage is its origin's) and shows the pool once
signed in. About 10 s. Skipped (77) without the browser or /usr/bin/etcd, unless
POOLRUN_REQUIRE_BROWSER=1.

  /usr/bin/python3 failover_test.py --poold B --out DIR
"""

import argparse
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from support import wait_until  # noqa: E402

ETCD = "/usr/bin/etcd"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poold", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    def scenario(procs, workdir, open_browser):
        if not os.access(ETCD, os.X_OK):
            support.skip(f"no {ETCD} (apt-get install etcd-server)")
        etcd = start_etcd(procs, workdir)
        tokens = os.path.join(workdir, "tokens")
        support.write_whole(tokens, "".join(
            f"{tok} {owner} {'admin' if owner == 'root' else 'user'}\n" for owner, tok in support.TOKENS.items()))
        a = Replica(procs, args.poold, workdir, "a", etcd, tokens)
        a.wait_for("poold: listening on ")
        b = Replica(procs, args.poold, workdir, "b", etcd, tokens)
        b.wait_for("poold: standby")
        run(open_browser(), a, b, procs, args.out)

    support.run_with_browser("poolrun-dashboard-failover-", args.out, scenario)


def start_etcd(procs, workdir):
    """A one-member etcd on loopback; its client URL."""
    client, peer = support.free_port(), support.free_port()
    c, p = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    procs.start([ETCD, "--name", "m0", "--data-dir", os.path.join(workdir, "etcd"), "--listen-client-urls", c,
                 "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                 "--initial-cluster", f"m0={p}", "--heartbeat-interval", "50", "--election-timeout", "500"],
                os.path.join(workdir, "etcd.log"))
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", client), timeout=0.2):
                return f"etcd://127.0.0.1:{client}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("etcd did not listen within 20 s")


class Replica:
    """One poold replica of the pool on etcd, on a port of its own."""

    def __init__(self, procs, binary, workdir, name, etcd, tokens):
        port = support.free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = procs.start([binary, "--listen", f"127.0.0.1:{port}", "--state", os.path.join(workdir, name),
                                 "--token-file", tokens, "--store", etcd, "--advertise", self.url,
                                 "--etcd-ttl", "2"], os.path.join(workdir, f"poold-{name}.log"))

    def wait_for(self, line, timeout=30):
        def seen():
            if self.proc.poll() is not None:
                raise RuntimeError(f"poold exited with {self.proc.returncode}: {open(self.proc.log).read()}")
            with open(self.proc.log) as f:
                return any(l.startswith(line) for l in f)
        wait_until(seen, f"{self.url}: '{line}'", timeout=timeout)


def run(b, a, other, procs, out):
    b.get(a.url + "/")
    wait_until(lambda: b.find_element("id", "token"), "the sign-in form")[0].send_keys(support.TOKENS["root"] + "\n")
    wait_until(lambda: b.find_element("id", "who").text == "root (admin)", "the page signed in on the leader")
    time.sleep(0.5)  # the page asks the leader for the replicas as it starts
    procs.stop(a.proc, sig=signal.SIGKILL)

    def stranded():  # text and links read together: the page redraws the box as it keeps asking
        box = b.find_element("id", "error")
        if not box.is_displayed() or "does not answer as the pool's leader" not in box.text:
            return None
        return box.text, [e.get_attribute("href") for e in box.find_elements("css selector", "a")]
    text, links = wait_until(stranded, "the page saying its poold is gone", timeout=15)[0]
    b.save_screenshot(os.path.join(out, "failover-01-stranded.png"))
    assert a.url in text, text
    assert "sign in there again" in text, text
    assert links == [other.url + "/"], links
    # The link opens the other replica: the leader once it has taken over (until then, a standby
    # that redirects, or refuses while there is no leader: the test reloads until it leads).
    other.wait_for("poold: listening on ", timeout=20)

    def open_other():  # found afresh at each try: the page redraws the box as it keeps asking
        if b.current_url.startswith(other.url):
            return True  # a click that went through as its element went stale
        link = b.find_element("id", "error").find_element("css selector", "a")
        if link.get_attribute("href") != other.url + "/":
            return False
        link.click()
        return True
    wait_until(open_other, "a click on the other replica's link")
    wait_until(lambda: b.current_url.startswith(other.url), "the other replica's page")
    sign_in = wait_until(lambda: b.find_element("id", "token").is_displayed() and b.find_element("id", "token"),
                         "the sign-in on the new leader's page")[0]
    sign_in.send_keys(support.TOKENS["root"] + "\n")
    wait_until(lambda: b.find_element("id", "who").text == "root (admin)", "the page signed in on the new leader")
    b.save_screenshot(os.path.join(out, "failover-02-new-leader.png"))
    errors = [e["message"] for e in b.get_log("browser") if e.get("source") == "javascript"]
    assert not errors, f"the page's script failed: {errors}"


if __name__ == "__main__":
    main()
