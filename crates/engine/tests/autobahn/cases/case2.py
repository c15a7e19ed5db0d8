"""Autobahn|Testsuite cases 2.x (Pings/Pongs), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case2_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case2_1.py


class Case2_1(Case):
    DESCRIPTION = """Send ping without payload."""

    EXPECTATION = """Pong (with empty payload) is sent in reply to Ping. Clean close with normal code."""

    def onOpen(self):
        self.expected[Case.OK] = [("pong", b"")]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 9)
        self.p.closeAfter(1)

# case2_2.py


class Case2_2(Case):
    DESCRIPTION = """Send ping with small text payload."""

    EXPECTATION = """Pong with payload echo'ed is sent in reply to Ping. Clean close with normal code."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("pong", payload)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 9, payload = payload)
        self.p.closeAfter(1)


# case2_3.py


class Case2_3(Case):
    DESCRIPTION = """Send ping with small binary (non UTF-8) payload."""

    EXPECTATION = """Pong with payload echo'ed is sent in reply to Ping. Clean close with normal code."""

    def onOpen(self):
        payload = b"\x00\xff\xfe\xfd\xfc\xfb\x00\xff"

        self.expected[Case.OK] = [("pong", payload)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 9, payload = payload)
        self.p.closeAfter(1)


# case2_4.py


class Case2_4(Case):
    DESCRIPTION = """Send ping with binary payload of 125 octets."""

    EXPECTATION = """Pong with payload echo'ed is sent in reply to Ping. Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 125
        self.expected[Case.OK] = [("pong", payload)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 9, payload = payload)
        self.p.closeAfter(1)


# case2_5.py


class Case2_5(Case):
    DESCRIPTION = """Send ping with binary payload of 126 octets."""

    EXPECTATION = """Connection is failed immediately (1002/Protocol Error), since control frames are only allowed to have payload up to and including 125 octets.."""

    def onOpen(self):
        payload = b"\xfe" * 126
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 9, payload = payload)
        self.p.killAfter(1)


# case2_6.py


class Case2_6(Case):
    DESCRIPTION = """Send ping with binary payload of 125 octets, send in octet-wise chops."""

    EXPECTATION = """Pong with payload echo'ed is sent in reply to Ping. Implementations must be TCP clean. Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 125
        self.expected[Case.OK] = [("pong", payload)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 9, payload = payload, chopsize = 1)
        self.p.closeAfter(2)


# case2_7.py


class Case2_7(Case):
    DESCRIPTION = """Send unsolicited pong without payload. Verify nothing is received. Clean close with normal code."""

    EXPECTATION = """Nothing."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 10)
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.closeAfter(1)


# case2_8.py


class Case2_8(Case):
    DESCRIPTION = """Send unsolicited pong with payload. Verify nothing is received. Clean close with normal code."""

    EXPECTATION = """Nothing."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 10, payload = b"unsolicited pong payload")
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.closeAfter(1)


# case2_9.py


class Case2_9(Case):
    DESCRIPTION = """Send unsolicited pong with payload. Send ping with payload. Verify pong for ping is received."""

    EXPECTATION = """Nothing in reply to own Pong, but Pong with payload echo'ed in reply to Ping. Clean close with normal code."""

    def onOpen(self):
        payload = b"ping payload"
        self.expected[Case.OK] = [("pong",payload)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 10, payload = b"unsolicited pong payload")
        self.p.sendFrame(opcode = 9, payload = payload)
        self.p.closeAfter(1)


# case2_10.py


class Case2_10(Case):
    DESCRIPTION = """Send 10 Pings with payload."""

    EXPECTATION = """Pongs for our Pings with all the payloads. Note: This is not required by the Spec .. but we check for this behaviour anyway. Clean close with normal code."""

    def init(self):
        self.chopsize = None

    def onOpen(self):
        self.expected[Case.OK] = []
        for i in range(0, 10):
            payload = b"payload-%d" % i
            self.expected[Case.OK].append(("pong", payload))
            self.p.sendFrame(opcode = 9, payload = payload, chopsize = self.chopsize)
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.closeAfter(3)


# case2_11.py


class Case2_11(Case2_10):
    DESCRIPTION = """Send 10 Pings with payload. Send out octets in octet-wise chops."""

    EXPECTATION = """Pongs for our Pings with all the payloads. Note: This is not required by the Spec .. but we check for this behaviour anyway. Clean close with normal code."""

    def init(self):
        self.chopsize = 1
