#!/usr/bin/env python3
"""Checks a `dtc plan report` page in a real headless Chromium.

  check_report.py page REPORT.html [--screenshot OUT.png] [--expect-gpus N]
                  [--expect-summarized N] [--expect-lanes P] [--max-load-s S]
  check_report.py time SECONDS -- COMMAND...

`page` opens the file in Debian's `chromium` driven over the DevTools
protocol on a pipe (--remote-debugging-pipe: no sockets, stdlib only) and
fails when the page logs a console error, throws, or makes any network
request besides loading itself. It then reads counts off the live DOM (GPU
boxes, summarized groups, timeline lanes), clicks the mesh's coloring
buttons, prints the counts as JSON for FileCheck and writes a full-page
screenshot. A missing chromium is a failure, never a silent pass.

`time` runs COMMAND and fails if it takes longer than SECONDS.
"""

import argparse
import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

TIMEOUT_S = 60


def fail(message):
    print(f"check_report: error: {message}", file=sys.stderr)
    sys.exit(1)


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    fail("chromium not found; install Debian's 'chromium' package "
         "(scripts/setup.sh does)")


class Browser:
    """Chromium with the DevTools protocol on fds 3 (in) and 4 (out)."""

    def __init__(self, executable, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds():
            # Move both ends out of the way first: either may already be 3 or 4.
            r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-pipe", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-sync",
             "--disable-component-update", "--disable-default-apps",
             "--hide-scrollbars", "--mute-audio",
             f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=child_fds,
            # fds 3 and 4 are made after close_fds would run; Python's own
            # fds are close-on-exec anyway.
            close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.messages = queue.Queue()
        self.events = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buffer = b""
        while True:
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                self.messages.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                self.messages.put(json.loads(message))

    def _next_message(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            fail("chromium did not answer in time")
        try:
            message = self.messages.get(timeout=remaining)
        except queue.Empty:
            fail("chromium did not answer in time")
        if message is None:
            fail("chromium exited unexpectedly")
        return message

    def call(self, method, params=None, session=None):
        self.next_id += 1
        request = {"id": self.next_id, "method": method,
                   "params": params or {}}
        if session:
            request["sessionId"] = session
        os.write(self.to_chrome, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            message = self._next_message(deadline)
            if message.get("id") == self.next_id:
                if "error" in message:
                    fail(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method, deadline):
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            message = self._next_message(deadline)
            if message.get("method") == method:
                return message
            self.events.append(message)

    def drain(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                message = self.messages.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if message is None:
                break
            self.events.append(message)

    def close(self):
        try:
            self.call("Browser.close")
        except (SystemExit, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


# Counts read off the live DOM after the page's script ran; the coloring
# buttons are clicked to check that they recolor the mesh.
PROBE = r"""
(function(){
  var q = function(s){ return document.querySelectorAll(s); };
  var fills = function(){
    var seen = {};
    q('#mesh .gpu, #mesh .group').forEach(function(e){ seen[e.getAttribute('fill')] = 1; });
    return Object.keys(seen).length;
  };
  var r = {};
  r.title = document.title;
  r.gpu_boxes = q('#mesh .gpu').length;
  r.group_boxes = q('#mesh .group').length;
  r.group_gpus = 0;
  q('#mesh .group').forEach(function(e){ r.group_gpus += +e.getAttribute('data-count'); });
  r.nodes = q('#mesh .node').length;
  var stages = {};
  q('#mesh .gpu, #mesh .group').forEach(function(e){ stages[e.getAttribute('data-stage')] = 1; });
  r.mesh_stages = Object.keys(stages).length;
  r.lanes = q('#gantt .lane').length;
  r.lanes_with_work = 0;
  q('#gantt .lane').forEach(function(l){
    if (l.querySelector('.fwd') && l.querySelector('.bwd')) r.lanes_with_work++; });
  r.memory_bars = q('#memory .mem-bar').length;
  r.alternatives = q('#alternatives tr.alt').length;
  r.counterfactuals = q('#counterfactuals tr.alt').length;
  r.colors_by_stage = fills();
  var modes = {};
  q('.modes button').forEach(function(b){
    b.click(); modes[b.getAttribute('data-mode')] = fills(); });
  r.colors_by_mode = modes;
  r.width = document.documentElement.scrollWidth;
  r.height = document.documentElement.scrollHeight;
  return JSON.stringify(r);
})()
"""


def check_page(args):
    html = os.path.abspath(args.report)
    if not os.path.isfile(html):
        fail(f"{html}: no such file")
    url = "file://" + urllib.parse.quote(html)
    executable = find_chromium()
    with tempfile.TemporaryDirectory(prefix="dtc-chromium-") as profile:
        browser = Browser(executable, profile)
        try:
            target = browser.call("Target.createTarget", {"url": "about:blank"})
            session = browser.call("Target.attachToTarget", {
                "targetId": target["targetId"], "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                browser.call(f"{domain}.enable", session=session)
            browser.call("Emulation.setDeviceMetricsOverride", {
                "width": 1280, "height": 900, "deviceScaleFactor": 1,
                "mobile": False}, session=session)
            browser.events.clear()
            start = time.monotonic()
            browser.call("Page.navigate", {"url": url}, session=session)
            browser.wait_for("Page.loadEventFired", start + TIMEOUT_S)
            load_s = time.monotonic() - start
            browser.drain(0.5)
            probe = browser.call("Runtime.evaluate", {
                "expression": PROBE, "returnByValue": True}, session=session)
            if "exceptionDetails" in probe:
                fail(f"probe failed: {probe['exceptionDetails']}")
            counts = json.loads(probe["result"]["value"])
            # Back to the default coloring for the screenshot.
            browser.call("Runtime.evaluate", {"expression":
                "var b=document.querySelector('.modes button');b&&b.click();"},
                session=session)
            if args.screenshot:
                browser.call("Emulation.setDeviceMetricsOverride", {
                    "width": 1280, "height": max(900, counts["height"]),
                    "deviceScaleFactor": 1, "mobile": False}, session=session)
                params = {"format": "png"}
                if args.clip:
                    top, height = (float(x) for x in args.clip.split(":"))
                    params["clip"] = {"x": 0, "y": top, "width": 1280,
                                      "height": height, "scale": 1}
                shot = browser.call("Page.captureScreenshot", params,
                                    session=session)
                with open(args.screenshot, "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
            browser.drain(0.2)
        finally:
            browser.close()

    problems = []
    for event in browser.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in (
                "error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", "")))
                            for a in params.get("args", []))
            problems.append(f"console error: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            problems.append("uncaught exception: " + str(
                details.get("exception", {}).get("description", details.get("text"))))
        elif method == "Log.entryAdded" and params.get("entry", {}).get(
                "level") == "error":
            problems.append("log error: " + params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            request_url = params.get("request", {}).get("url", "")
            if request_url != url:
                problems.append(f"network request: {request_url}")
    if problems:
        fail("; ".join(problems))

    counts["load_under_limit"] = load_s < args.max_load_s
    print(json.dumps(counts, sort_keys=True))
    print(f"load {load_s:.3f} s", file=sys.stderr)
    if not counts["load_under_limit"]:
        fail(f"the page took {load_s:.2f} s to load (limit {args.max_load_s} s)")
    if args.expect_gpus is not None and counts["gpu_boxes"] != args.expect_gpus:
        fail(f"{counts['gpu_boxes']} GPU boxes, expected {args.expect_gpus}")
    if args.expect_summarized is not None and (
            counts["gpu_boxes"] != 0 or
            counts["group_gpus"] != args.expect_summarized):
        fail(f"summarized mesh: {counts['gpu_boxes']} GPU boxes and "
             f"{counts['group_gpus']} GPUs in groups, expected 0 and "
             f"{args.expect_summarized}")
    if args.expect_lanes is not None and (
            counts["lanes"] != args.expect_lanes or
            counts["lanes_with_work"] != args.expect_lanes):
        fail(f"{counts['lanes']} timeline lanes ({counts['lanes_with_work']} "
             f"with forward and backward work), expected {args.expect_lanes}")
    if args.screenshot:
        with open(args.screenshot, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                fail(f"{args.screenshot}: not a PNG")


def check_time(args):
    if not args.command:
        fail("time: no command")
    start = time.monotonic()
    result = subprocess.run(args.command)
    seconds = time.monotonic() - start
    print(f"took {seconds:.3f} s (limit {args.seconds} s)")
    if result.returncode != 0:
        fail(f"{args.command[0]} exited with {result.returncode}")
    if seconds >= args.seconds:
        fail(f"took {seconds:.2f} s, over the {args.seconds} s limit")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    page = sub.add_parser("page")
    page.add_argument("report")
    page.add_argument("--screenshot")
    page.add_argument("--clip", help="TOP:HEIGHT, a band of the page only")
    page.add_argument("--expect-gpus", type=int)
    page.add_argument("--expect-summarized", type=int)
    page.add_argument("--expect-lanes", type=int)
    page.add_argument("--max-load-s", type=float, default=2.0)
    timed = sub.add_parser("time")
    timed.add_argument("seconds", type=float)
    timed.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.mode == "page":
        check_page(args)
    else:
        if args.command and args.command[0] == "--":
            args.command = args.command[1:]
        check_time(args)


if __name__ == "__main__":
    main()
