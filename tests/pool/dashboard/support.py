"""What the dashboard's browser test and benchmark share: poold and poold-agents on 127.0.0.1, a
headless Chromium driven by Selenium through Debian's chromedriver, and the cleanup of everything
they started, however they end.

Run with /usr/bin/python3 (Debian's python3-selenium is installed for it). Where Chromium,
chromedriver or Selenium is missing the caller exits 77 (CTest's skip), unless
POOLRUN_REQUIRE_BROWSER=1 (scripts/test.sh sets it: in CI a missing browser is a failure).
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import ssl
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

SKIP = 77
TOKENS = {
    "alice": "tok-alice-0123456789",
    "bob": "tok-bob-0123456789",
    "root": "tok-root-0123456789",
}


def skip(why):
    if os.environ.get("POOLRUN_REQUIRE_BROWSER") == "1":
        print(f"FAIL: {why}; POOLRUN_REQUIRE_BROWSER=1 wants the browser tests to run here "
              "(scripts/setup-deps.sh installs chromium, chromium-driver and python3-selenium)")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def need_browser():
    """The paths of chromium and chromedriver, and selenium's webdriver module; skips without them."""
    try:
        from selenium import webdriver  # noqa: F401
    except ImportError:
        skip(f"Selenium is not importable by {sys.executable} (apt-get install python3-selenium, "
             "and run this with /usr/bin/python3)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    if not chromium:
        skip("no chromium on PATH (apt-get install chromium)")
    if not driver:
        skip("no chromedriver (apt-get install chromium-driver)")
    return chromium, driver


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    # PR_SET_PDEATHSIG: a child killed with this script (a CTest timeout) does not live on.
    _libc.prctl(1, signal.SIGKILL)
    os.setsid()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_pci_addresses(topology):
    """The PCI addresses of an NCCL topology XML's GPUs, in their order."""
    root = ET.parse(topology).getroot()
    gpus = []
    for pci in root.iter("pci"):
        gpu = pci.find("gpu")
        if gpu is not None:
            gpus.append((int(gpu.get("dev", len(gpus))), pci.get("busid").lower()))
    return [busid for _, busid in sorted(gpus)]


def fake_nvml(pcis, utilization=0, temperature=35, memory_used_gib=1):
    """A fake NVML document (docs/fake-nvml.md): healthy H100s with the given readings."""
    return {"gpus": [{
        "pci": pci, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-fake-0000-{i:04d}",
        "memory_total_bytes": 80 << 30, "memory_used_bytes": memory_used_gib << 30,
        "compute_capability": [9, 0], "utilization": {"gpu": utilization, "memory": utilization // 2},
        "temperature_c": temperature, "power_mw": 70000 + utilization * 4000, "persistence": True,
        "ecc_uncorrected_volatile": 0, "retired_pages_pending": False,
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "clocks_event_reasons": 1, "processes": [], "xid_events": [],
    } for i, pci in enumerate(pcis)]}


def write_whole(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Processes:
    """Everything this script starts, stopped (SIGTERM, then SIGKILL) by close(), whatever happens."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []

    def start(self, argv, log, env=None):
        out = open(log, "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        p.log = log
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM):
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def close(self):
        for p in reversed(self.procs):
            self.stop(p)
        # Chromium's helpers are started by chromedriver, not by us: any left with our profile
        # folder (which only they name) are ended by their pid.
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if self.workdir.encode() in f.read():
                        os.kill(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


class Poold:
    """poold on 127.0.0.1 with a token file: alice and bob users, root the administrator, and a
    node token per agent node."""

    def __init__(self, procs, binary, workdir, nodes=(), extra=(), ca=None):
        self.procs = procs
        self.workdir = workdir
        # https: the API calls trust `ca` (a PEM file) and check poold's certificate against it.
        self.ssl = ssl.create_default_context(cafile=ca) if ca else None
        lines = [f"{tok} {owner} {'admin' if owner == 'root' else 'user'}" for owner, tok in TOKENS.items()]
        lines += [f"tok-node-{n}-0123456789 {n} node" for n in nodes]
        self.tokens = os.path.join(workdir, "tokens")
        write_whole(self.tokens, "\n".join(lines) + "\n")
        self.proc = procs.start([binary, "--listen", "127.0.0.1:0", "--state", os.path.join(workdir, "state"),
                                 "--token-file", self.tokens, *extra], os.path.join(workdir, "poold.log"))
        deadline = time.time() + 60
        self.url = None
        while time.time() < deadline and self.url is None:
            with open(self.proc.log) as f:
                for line in f:
                    if line.startswith("poold: listening on "):
                        self.url = line.split()[-1]
            if self.proc.poll() is not None:
                raise RuntimeError(f"poold exited with {self.proc.returncode}: {open(self.proc.log).read()}")
            time.sleep(0.05)
        if self.url is None:
            raise RuntimeError("poold did not say where it listens within 60 s")

    def call(self, method, path, body=None, who="root"):
        """(status, parsed body) of one API call with `who`'s token."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + TOKENS[who]})
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ssl) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def get(self, path, who="root"):
        status, body = self.call("GET", path, who=who)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body}")
        return body


def start_browser(procs, chromium, driver, workdir, width=1400, height=1000, extra=()):
    """A headless Chromium under a chromedriver on loopback that this script started; `extra`: more
    command-line switches of Chromium's."""
    from selenium import webdriver
    port = free_port()
    procs.start([driver, f"--port={port}", "--allowed-ips=127.0.0.1"], os.path.join(workdir, "chromedriver.log"))
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-extensions", "--disable-background-networking",
              f"--window-size={width},{height}", f"--user-data-dir={os.path.join(workdir, 'chromium-profile')}",
              *extra]:
        options.add_argument(a)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Remote(command_executor=f"http://127.0.0.1:{port}", options=options)


def run_with_browser(prefix, out, scenario):
    """The frame of every browser test: a work folder (`prefix`), the processes' keeper, and
    scenario(procs, workdir, open_browser), where open_browser(extra=()) starts a headless Chromium
    (start_browser's `extra`). Prints PASS with the time taken; however it ends, prints the page's
    JavaScript console, closes the browsers and the processes and removes the folder. Skips (77)
    without the browser."""
    chromium, driver = need_browser()
    os.makedirs(out, exist_ok=True)
    workdir = new_workdir(prefix)
    procs = Processes(workdir)
    browsers = []
    started = time.time()

    def open_browser(extra=()):
        browsers.append(start_browser(procs, chromium, driver, workdir, extra=extra))
        return browsers[-1]

    try:
        scenario(procs, workdir, open_browser)
        print(f"PASS in {time.time() - started:.1f} s; screenshots in {out}")
    finally:
        for browser in browsers:
            try:
                for entry in browser.get_log("browser"):
                    if entry["source"] == "javascript":
                        print("browser console:", entry["message"])
                browser.quit()
            except Exception as e:
                print(f"(closing the browser: {e})")
        procs.close()
        shutil.rmtree(workdir, ignore_errors=True)


def wait_until(check, what, timeout=10.0, interval=0.05):
    """Polls `check` until it returns a true value; returns (value, seconds waited); fails naming `what`."""
    start = time.time()
    last = None
    while time.time() - start < timeout:
        try:
            last = check()
            if last:
                return last, time.time() - start
        except Exception as e:  # a page being redrawn: try again
            last = e
        time.sleep(interval)
    raise AssertionError(f"{what}: not seen within {timeout:.0f} s (last: {last!r})")


def new_workdir(prefix):
    return tempfile.mkdtemp(prefix=prefix)
