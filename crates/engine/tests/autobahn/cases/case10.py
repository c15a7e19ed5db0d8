"""Autobahn|Testsuite cases 10.x (Misc), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case10_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case10_1_1.py


class Case10_1_1(Case):
    DESCRIPTION = """Send text message with payload of length 65536 auto-fragmented with <b>autoFragmentSize = 1300</b>."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent and transmitted frame counts as expected). Clean close with normal code."""

    def onOpen(self):
        self.payload = b"*" * 65536
        self.p.autoFragmentSize = 1300
        self.expected[Case.OK] = [("message", self.payload, False)]
        self.expectedClose = {"closedByMe": True, "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL], "requireClean": True}
        self.p.sendMessage(self.payload)
        self.p.killAfter(10)

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)
        if self.p.connectionWasOpen:
            frames_expected = {}
            frames_expected[0] = len(self.payload) // self.p.autoFragmentSize
            frames_expected[1] = 1 if len(self.payload) % self.p.autoFragmentSize > 0 else 0
            frames_got = {}
            frames_got[0] = self.p.txFrameStats[0]
            frames_got[1] = self.p.txFrameStats[1]
            if frames_expected == frames_got:
                pass
            else:
                self.behavior = Case.FAILED
                self.result = "Frames transmitted %s does not match what we expected %s." % (str(frames_got), str(frames_expected))
        else:
            self.behavior = Case.FAILED
            self.result = "WebSocket connection was never open"
