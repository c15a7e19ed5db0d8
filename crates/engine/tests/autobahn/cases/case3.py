"""Autobahn|Testsuite cases 3.x (Reserved Bits), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case3_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case3_1.py


class Case3_1(Case):
    DESCRIPTION = """Send small text message with <b>RSV = 1</b>."""

    EXPECTATION = """The connection is failed immediately (1002/protocol error), since RSV must be 0, when no extension defining RSV meaning has been negotiated."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],
                            "requireClean": False}
        self.p.sendFrame(opcode = 1, payload = b"Hello, world!", rsv = 1)
        self.p.killAfter(1)


# case3_2.py


class Case3_2(Case):
    DESCRIPTION = """Send small text message, then send again with <b>RSV = 2</b>, then send Ping."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since RSV must be 0, when no extension defining RSV meaning has been negotiated. The Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.sendFrame(opcode = 1, payload = payload, rsv = 2)
        self.p.sendFrame(opcode = 9)
        self.p.killAfter(1)


# case3_3.py


class Case3_3(Case):
    DESCRIPTION = """Send small text message, then send again with <b>RSV = 3</b>, then send Ping. Octets are sent in frame-wise chops. Octets are sent in octet-wise chops."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since RSV must be 0, when no extension defining RSV meaning has been negotiated. The Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload, sync = True)
        self.p.sendFrame(opcode = 1, payload = payload, rsv = 3, sync = True)
        self.p.sendFrame(opcode = 9, sync = True)
        self.p.killAfter(1)


# case3_4.py


class Case3_4(Case):
    DESCRIPTION = """Send small text message, then send again with <b>RSV = 4</b>, then send Ping. Octets are sent in octet-wise chops."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since RSV must be 0, when no extension defining RSV meaning has been negotiated. The Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload, chopsize = 1)
        self.p.sendFrame(opcode = 1, payload = payload, rsv = 4, chopsize = 1)
        self.p.sendFrame(opcode = 9, chopsize = 1)
        self.p.killAfter(1)


# case3_5.py


class Case3_5(Case):
    DESCRIPTION = """Send small binary message with <b>RSV = 5</b>."""

    EXPECTATION = """The connection is failed immediately, since RSV must be 0."""

    def onOpen(self):
        payload = b"\x00\xff\xfe\xfd\xfc\xfb\x00\xff"
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 2, payload = payload, rsv = 5)
        self.p.killAfter(1)


# case3_6.py


class Case3_6(Case):
    DESCRIPTION = """Send Ping with <b>RSV = 6</b>."""

    EXPECTATION = """The connection is failed immediately, since RSV must be 0."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 2, payload = payload, rsv = 6)
        self.p.killAfter(1)


# case3_7.py


class Case3_7(Case):
    DESCRIPTION = """Send Close with <b>RSV = 7</b>."""

    EXPECTATION = """The connection is failed immediately, since RSV must be 0."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 8, rsv = 7)
        self.p.killAfter(1)
