"""Autobahn|Testsuite cases 1.x (Framing), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case1_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case1_1_1.py


class Case1_1_1(Case):
    DESCRIPTION = """Send text message with payload 0."""

    EXPECTATION = """Receive echo'ed text message (with empty payload). Clean close with normal code."""

    def onOpen(self):
        payload = b""
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(1)


# case1_1_2.py


class Case1_1_2(Case):
    DESCRIPTION = """Send text message message with payload of length 125."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"*" * 125
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}

        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(1)


# case1_1_3.py


class Case1_1_3(Case):
    DESCRIPTION = """Send text message message with payload of length 126."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"*" * 126
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}

        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(1)


# case1_1_4.py


class Case1_1_4(Case):
    DESCRIPTION = """Send text message message with payload of length 127."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"*" * 127
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(1)


# case1_1_5.py


class Case1_1_5(Case):
    DESCRIPTION = """Send text message message with payload of length 128."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"*" * 128
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(1)


# case1_1_6.py


class Case1_1_6(Case):
    DESCRIPTION = """Send text message message with payload of length 65535."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"*" * 65535
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(10)


# case1_1_7.py


class Case1_1_7(Case):
    DESCRIPTION = """Send text message message with payload of length 65536."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"*" * 65536
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(10)


# case1_1_8.py


class Case1_1_8(Case):
    DESCRIPTION = """Send text message message with payload of length 65536. Sent out data in chops of 997 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"*" * 65536
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = payload, chopsize = 997)
        self.p.killAfter(10)


# case1_2_1.py


class Case1_2_1(Case):
    DESCRIPTION = """Send binary message with payload 0."""

    EXPECTATION = """Receive echo'ed binary message (with empty payload). Clean close with normal code."""

    def onOpen(self):
        payload = b""
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload)
        self.p.killAfter(1)


# case1_2_2.py


class Case1_2_2(Case):
    DESCRIPTION = """Send binary message message with payload of length 125."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 125
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload)
        self.p.killAfter(1)


# case1_2_3.py


class Case1_2_3(Case):
    DESCRIPTION = """Send binary message message with payload of length 126."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 126
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload)
        self.p.killAfter(1)


# case1_2_4.py


class Case1_2_4(Case):
    DESCRIPTION = """Send binary message message with payload of length 127."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 127
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload)
        self.p.killAfter(1)


# case1_2_5.py


class Case1_2_5(Case):
    DESCRIPTION = """Send binary message message with payload of length 128."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 128
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload)
        self.p.killAfter(1)


# case1_2_6.py


class Case1_2_6(Case):
    DESCRIPTION = """Send binary message message with payload of length 65535."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 65535
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload)
        self.p.killAfter(10)


# case1_2_7.py


class Case1_2_7(Case):
    DESCRIPTION = """Send binary message message with payload of length 65536."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 65536
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload)
        self.p.killAfter(10)


# case1_2_8.py


class Case1_2_8(Case):
    DESCRIPTION = """Send binary message message with payload of length 65536. Sent out data in chops of 997 octets."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent). Clean close with normal code."""

    def onOpen(self):
        payload = b"\xfe" * 65536
        self.expected[Case.OK] = [("message", payload, True)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 2, payload = payload, chopsize = 997)
        self.p.killAfter(10)
