#!/usr/bin/python3
"""The dashboard over HTTPS in a real headless browser (docs/tls.md, docs/dashboard.md).

poold serves HTTPS with a certificate of a CA the test makes with openssl, the 16 nodes of
clusters/hgx-h100.toml registered. Chromium trusts that one server key alone
(--ignore-certificate-errors-spki-list with the key's SHA-256: no other certificate error is
ignored); the test signs in, sees the page's counts match poold's over https://, drains a node from
the page (a POST from the page over TLS), and checks that the page's address and every request it
made were https://. A screenshot goes to --out.

  /usr/bin/python3 https_test.py --poold B --source DIR --out DIR
"""

import argparse
import base64
import hashlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from support import wait_until  # noqa: E402


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(workdir):
    """A CA and poold's certificate for 127.0.0.1 (its key mode 0600): (ca, cert, key, spki hash)."""
    d = os.path.join(workdir, "pki")
    os.makedirs(d)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=poolrun https test CA", "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=poold",
            "-keyout", "poold.key", "-out", "poold.csr", cwd=d)
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "poold.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "ext", "-out", "poold.crt", cwd=d)
    os.chmod(os.path.join(d, "poold.key"), 0o600)
    der = subprocess.run(["openssl", "x509", "-in", "poold.crt", "-noout", "-pubkey"], cwd=d, check=True,
                         capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=der, check=True,
                         capture_output=True).stdout
    spki = base64.b64encode(hashlib.sha256(der).digest()).decode()
    return (os.path.join(d, "ca.crt"), os.path.join(d, "poold.crt"), os.path.join(d, "poold.key"), spki)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poold", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    def scenario(procs, workdir, open_browser):
        ca, cert, key, spki = make_pki(workdir)
        poold = support.Poold(procs, args.poold, workdir, (),
                              ["--tls-cert", cert, "--tls-key", key,
                               "--cluster", os.path.join(args.source, "clusters", "hgx-h100.toml")], ca=ca)
        assert poold.url.startswith("https://127.0.0.1:"), poold.url
        run(poold, open_browser([f"--ignore-certificate-errors-spki-list={spki}"]), args.out)

    support.run_with_browser("poolrun-dashboard-https-", args.out, scenario)


def run(poold, b, out):
    def count(name):
        return int(b.execute_script(
            "const e = document.querySelector(`#summary [data-count='${arguments[0]}'] b`);"
            "return e ? e.textContent : null;", name) or -1)

    b.get(poold.url + "/")
    box = wait_until(lambda: b.find_element("id", "token"), "the sign-in form over https")[0]
    box.send_keys(support.TOKENS["root"] + "\n")
    free = poold.get("/v1/status")["gpus"]["free"]
    assert free == 128, free
    wait_until(lambda: count("free") == 128, "128 free GPUs on the page, read over https")

    # A drain from the page (the node's details, its Drain button, the confirmation): a POST from
    # the page over TLS, which poold takes.
    find = b.find_element("id", "find")
    find.clear()
    find.send_keys("hgx05\n")
    wait_until(lambda: b.execute_script(
        "const d = document.querySelector(`#details dd[data-field='gpu']`); return d && d.textContent") == "hgx05:0",
        "hgx05's details")
    wait_until(lambda: b.execute_script(
        "const x = [...document.querySelectorAll('#details button')].find((e) => e.textContent.startsWith('Drain hgx05'));"
        "if (!x) return false; x.click(); return true;"), "the Drain hgx05 button")
    wait_until(lambda: b.execute_script("return document.getElementById('confirm').open"), "the confirmation")
    b.find_element("id", "confirm-ok").click()
    wait_until(lambda: any(n["name"] == "hgx05" and n["state"] == "draining" for n in poold.get("/v1/nodes")),
               "hgx05 drained from the page, over https")
    b.save_screenshot(os.path.join(out, "https-overview.png"))

    assert b.execute_script("return location.protocol") == "https:"
    urls = b.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert urls and all(u.startswith(poold.url) for u in urls), urls


if __name__ == "__main__":
    main()
