"""Autobahn|Testsuite cases 4.x (Opcodes), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case4_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case4_1_1.py


class Case4_1_1(Case):
    DESCRIPTION = """Send frame with reserved non-control <b>Opcode = 3</b>."""

    EXPECTATION = """The connection is failed immediately."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 3)
        self.p.killAfter(1)


# case4_1_2.py


class Case4_1_2(Case):
    DESCRIPTION = """Send frame with reserved non-control <b>Opcode = 4</b> and non-empty payload."""

    EXPECTATION = """The connection is failed immediately."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 4, payload = b"reserved opcode payload")
        self.p.killAfter(1)


# case4_1_3.py


class Case4_1_3(Case):
    DESCRIPTION = """Send small text message, then send frame with reserved non-control <b>Opcode = 5</b>, then send Ping."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since reserved opcode frame is used. A Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.sendFrame(opcode = 5)
        self.p.sendFrame(opcode = 9)
        self.p.killAfter(1)


# case4_1_4.py


class Case4_1_4(Case):
    DESCRIPTION = """Send small text message, then send frame with reserved non-control <b>Opcode = 6</b> and non-empty payload, then send Ping."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since reserved opcode frame is used. A Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.sendFrame(opcode = 6, payload = payload)
        self.p.sendFrame(opcode = 9)
        self.p.killAfter(1)


# case4_1_5.py


class Case4_1_5(Case):
    DESCRIPTION = """Send small text message, then send frame with reserved non-control <b>Opcode = 7</b> and non-empty payload, then send Ping."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since reserved opcode frame is used. A Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload, chopsize = 1)
        self.p.sendFrame(opcode = 7, payload = payload, chopsize = 1)
        self.p.sendFrame(opcode = 9, chopsize = 1)
        self.p.killAfter(1)


# case4_2_1.py


class Case4_2_1(Case):
    DESCRIPTION = """Send frame with reserved control <b>Opcode = 11</b>."""

    EXPECTATION = """The connection is failed immediately."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 11)
        self.p.killAfter(1)


# case4_2_2.py


class Case4_2_2(Case):
    DESCRIPTION = """Send frame with reserved control <b>Opcode = 12</b> and non-empty payload."""

    EXPECTATION = """The connection is failed immediately."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 12, payload = b"reserved opcode payload")
        self.p.killAfter(1)


# case4_2_3.py


class Case4_2_3(Case):
    DESCRIPTION = """Send small text message, then send frame with reserved control <b>Opcode = 13</b>, then send Ping."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since reserved opcode frame is used. A Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.sendFrame(opcode = 13)
        self.p.sendFrame(opcode = 9)
        self.p.killAfter(1)


# case4_2_4.py


class Case4_2_4(Case):
    DESCRIPTION = """Send small text message, then send frame with reserved control <b>Opcode = 14</b> and non-empty payload, then send Ping."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since reserved opcode frame is used. A Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.sendFrame(opcode = 14, payload = payload)
        self.p.sendFrame(opcode = 9)
        self.p.killAfter(1)


# case4_2_5.py


class Case4_2_5(Case):
    DESCRIPTION = """Send small text message, then send frame with reserved control <b>Opcode = 15</b> and non-empty payload, then send Ping."""

    EXPECTATION = """Echo for first message is received, but then connection is failed immediately, since reserved opcode frame is used. A Pong is not received."""

    def onOpen(self):
        payload = b"Hello, world!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, payload = payload, chopsize = 1)
        self.p.sendFrame(opcode = 15, payload = payload, chopsize = 1)
        self.p.sendFrame(opcode = 9, chopsize = 1)
        self.p.killAfter(1)
