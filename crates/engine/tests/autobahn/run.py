#!/usr/bin/env python3
"""Runs Autobahn|Testsuite's fuzzing-client cases against a WebSocket echo
server and judges them by Autobahn's own rules, under its case numbers.

    python3 run.py --url ws://127.0.0.1:9001/echo [--cases 1.*,2.*]
                   [--exclude 9.*] [--json report.json] [--verbose]

Each case gets its own connection. One line per case ("1.1.1 OK"), a
summary per group, and the exit status: 0 when no case FAILED, 1 when one
did, 2 for a bad command line. Python 3 standard library only; see
README.md for where the cases come from and how the verdict is read.
"""

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from cases import case12  # noqa: E402
from cases.case import Case  # noqa: E402
from fuzzer import FuzzingClient  # noqa: E402

# Autobahn's report shows these behaviours as passed ("Pass", "Non-Strict",
# "Info"); anything else in that column is "Fail" (UNIMPLEMENTED, which
# only the compression cases give, is "Unimplemented").
BEHAVIOR_PASSES = {Case.OK, Case.NON_STRICT, Case.INFORMATIONAL}

# The close column: OK, and two that the report colours as a warning, not a
# failure ("WRONG CODE": a close code other than the case expects, shown
# orange; "FAILED BY CLIENT": the server left the TCP connection for us to
# drop, shown yellow). FAILED and UNCLEAN are red.
CLOSE_PASSES = {Case.OK, Case.INFORMATIONAL, Case.WRONG_CODE, Case.FAILED_BY_CLIENT}
STRICT_CLOSE_PASSES = {Case.OK, Case.INFORMATIONAL}

# How long one case may take, past its own timers, before the driver drops
# the connection (Autobahn itself would wait for ever on a silent peer).
CASE_TIMEOUT_S = 60


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="ws://HOST:PORT/PATH of an echo server")
    ap.add_argument("--cases", default="*", help="comma-separated case patterns (default: *)")
    ap.add_argument("--exclude", default="", help="comma-separated case patterns to leave out")
    ap.add_argument("--json", help="write a report (Autobahn's index.json, with details) here")
    ap.add_argument("--case-timeout", type=float, default=CASE_TIMEOUT_S,
                    help="seconds before a case's connection is dropped (default: %(default)s)")
    ap.add_argument("--strict-close", action="store_true",
                    help="fail a case whose close was WRONG CODE or FAILED BY CLIENT too (Autobahn "
                         "colours those as passes)")
    ap.add_argument("--verbose", action="store_true", help="print the wire log of every case not passed")
    ap.add_argument("--list", action="store_true", help="list the selected cases and exit")
    ap.add_argument("--testdata",
                    help="autobahntestsuite's testdata/ folder (from its sdist), which the compression "
                         "cases 12.x and 13.x send; without it they are left out")
    args = ap.parse_args()

    patterns = [p.strip() for p in args.cases.split(",") if p.strip()]
    excluded = [p.strip() for p in args.exclude.split(",") if p.strip()]
    if args.testdata:
        case12.TESTDATA_DIR = args.testdata
    else:
        excluded += ["12.*", "13.*"]
    try:
        ids = cases.parseSpecCases(patterns, excluded)
    except ValueError as e:
        ap.error(str(e))
    if not ids:
        ap.error("no case selected")
    if args.list:
        for case_id in ids:
            print(case_id, " ".join(cases.CasesById[case_id].DESCRIPTION.split("<")[0].split()))
        return 0

    results = []
    started = time.monotonic()
    agent = None
    for case_id in ids:
        client = FuzzingClient(args.url, cases.CasesById[case_id], args.case_timeout)
        try:
            case = client.run()
        except Exception:
            # A bug of the driver's, or a peer it did not foresee: this
            # case fails, the others still run.
            traceback.print_exc(file=sys.stdout)
            case = client.runCase
            case.behavior = case.behaviorClose = Case.FAILED
            case.result = case.resultClose = "the driver raised an exception (above)"
        agent = agent or client.agent
        r = report_of(case_id, client, case, args.strict_close)
        results.append(r)
        print(line_of(r), flush=True)
        if not r["passed"]:
            print("    result: %s" % r["result"])
            unclean = "; not clean: %s" % r["wasNotCleanReason"] if r["wasNotCleanReason"] else ""
            print("    close:  %s%s" % (r["resultClose"], unclean))
            if args.verbose:
                for row in client.wirelog[-60:]:
                    print("    wire:", row_text(row))
    elapsed = time.monotonic() - started

    print()
    for group, rows in grouped(results):
        print("%-4s %-28s %s" % (group, cases.CaseCategories.get(group, "Misc"), counts_text(rows)))
    failed = [r["id"] for r in results if r["verdict"] == Case.FAILED]
    print("all  %-28s %s in %.1f s" % ("(%d cases)" % len(results), counts_text(results), elapsed))
    if failed:
        print("FAILED cases: %s" % " ".join(failed))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({agent or "UnknownServer": {r["id"]: r for r in results}}, f, indent=2, sort_keys=True)
    return 1 if failed else 0


def report_of(case_id, client, case, strict_close):
    """The case's entry in the report: Autobahn's fields (index.json and
    the case's own report) and the verdict of the line."""
    close_passes = STRICT_CLOSE_PASSES if strict_close else CLOSE_PASSES
    passed = case.behavior in BEHAVIOR_PASSES and case.behaviorClose in close_passes
    if case.behavior == Case.UNIMPLEMENTED:
        verdict = Case.UNIMPLEMENTED
    elif passed:
        verdict = case.behavior
    else:
        verdict = Case.FAILED
    duration_ms = int(round(1000.0 * (client.caseEnd - client.caseStart))) if client.caseStart else 0
    return {
        "id": case_id,
        "verdict": verdict,
        "passed": passed,
        "behavior": case.behavior,
        "behaviorClose": case.behaviorClose,
        "result": case.result,
        "resultClose": case.resultClose,
        "remoteCloseCode": client.remoteCloseCode,
        "remoteCloseReason": client.remoteCloseReason,
        "localCloseCode": client.localCloseCode,
        "duration": duration_ms,
        "reportTime": case.reportTime,
        "description": " ".join(case.DESCRIPTION.split("<")[0].split()),
        "expectation": " ".join(case.EXPECTATION.split()),
        "expected": {k: [summary_of(e) for e in v] for k, v in case.expected.items()},
        "expectedClose": case.expectedClose,
        "received": [summary_of(e) for e in case.received],
        "closedByMe": client.closedByMe,
        "failedByMe": client.failedByMe,
        "droppedByMe": client.droppedByMe,
        "wasClean": client.wasClean,
        "wasNotCleanReason": client.wasNotCleanReason,
        "wasServerConnectionDropTimeout": client.wasServerConnectionDropTimeout,
        "wasOpenHandshakeTimeout": client.wasOpenHandshakeTimeout,
        "wasCloseHandshakeTimeout": client.wasCloseHandshakeTimeout,
        "txFrameStats": client.txFrameStats,
        "rxFrameStats": client.rxFrameStats,
        "connectionLost": client.lost_reason,
    }


def summary_of(event):
    """An event as the report shows it (fuzzing.py's cleanBin): a payload
    as text when it is UTF-8, else hex, cut at 64 bytes."""
    from fuzzer import ascii_log
    if event[0] == "message":
        return [event[0], ascii_log(event[1]), event[2]]
    if event[0] in ("ping", "pong"):
        return [event[0], ascii_log(event[1])]
    return list(event)


def line_of(r):
    details = []
    if r["behavior"] != r["verdict"]:
        details.append("behavior %s" % r["behavior"])
    if r["behaviorClose"] != Case.OK:
        details.append("close %s" % r["behaviorClose"])
    if r["verdict"] != Case.OK or r["remoteCloseCode"] not in (None, 1000):
        details.append("code %s" % r["remoteCloseCode"])
    if r["reportTime"]:
        details.append("%d ms" % r["duration"])
    text = "%s %s" % (r["id"], r["verdict"])
    return text + (" (%s)" % ", ".join(details) if details else "")


def row_text(row):
    return " ".join(str(x) for x in row)


def grouped(results):
    groups = {}
    for r in results:
        groups.setdefault(r["id"].split(".")[0], []).append(r)
    return sorted(groups.items(), key=lambda kv: int(kv[0]))


def counts_text(rows):
    order = [Case.OK, Case.NON_STRICT, Case.INFORMATIONAL, Case.UNIMPLEMENTED, Case.FAILED]
    n = {v: sum(1 for r in rows if r["verdict"] == v) for v in order}
    return ", ".join("%d %s" % (n[v], v) for v in order if n[v] or v == Case.FAILED)


if __name__ == "__main__":
    sys.exit(main())
