"""Autobahn|Testsuite cases 5.x (Fragmentation), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case5_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case5_1.py


class Case5_1(Case):
    DESCRIPTION = """Send Ping fragmented into 2 fragments."""

    EXPECTATION = """Connection is failed immediately, since control message MUST NOT be fragmented."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 9, fin = False, payload = b"fragment1")
        self.p.sendFrame(opcode = 0, fin = True, payload = b"fragment2")
        self.p.killAfter(1)


# case5_2.py


class Case5_2(Case):
    DESCRIPTION = """Send Pong fragmented into 2 fragments."""

    EXPECTATION = """Connection is failed immediately, since control message MUST NOT be fragmented."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 10, fin = False, payload = b"fragment1")
        self.p.sendFrame(opcode = 0, fin = True, payload = b"fragment2")
        self.p.killAfter(1)


# case5_3.py


class Case5_3(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments."""

    EXPECTATION = """Message is processed and echo'ed back to us."""

    def onOpen(self):
        fragments = [b"fragment1", b"fragment2"]
        self.expected[Case.OK] = [("message", b''.join(fragments), False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0])
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1])
        self.p.closeAfter(1)

# case5_4.py


class Case5_4(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments, octets are sent in frame-wise chops."""

    EXPECTATION = """Message is processed and echo'ed back to us."""

    def onOpen(self):
        fragments = [b"fragment1", b"fragment2"]
        self.expected[Case.OK] = [("message", b''.join(fragments), False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0], sync = True)
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1], sync = True)
        self.p.closeAfter(1)


# case5_5.py


class Case5_5(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments, octets are sent in octet-wise chops."""

    EXPECTATION = """Message is processed and echo'ed back to us."""

    def onOpen(self):
        fragments = [b"fragment1", b"fragment2"]
        self.expected[Case.OK] = [("message", b''.join(fragments), False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0], chopsize = 1)
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1], chopsize = 1)
        self.p.closeAfter(1)


# case5_6.py


class Case5_6(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments, one ping with payload in-between."""

    EXPECTATION = """A pong is received, then the message is echo'ed back to us."""

    def onOpen(self):
        ping_payload = b"ping payload"
        fragments = [b"fragment1", b"fragment2"]
        self.expected[Case.OK] = [("pong", ping_payload), ("message", b''.join(fragments), False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0])
        self.p.sendFrame(opcode = 9, fin = True, payload = ping_payload)
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1])
        self.p.closeAfter(1)


# case5_7.py


class Case5_7(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments, one ping with payload in-between. Octets are sent in frame-wise chops."""

    EXPECTATION = """A pong is received, then the message is echo'ed back to us."""

    def onOpen(self):
        ping_payload = b"ping payload"
        fragments = [b"fragment1", b"fragment2"]
        self.expected[Case.OK] = [("pong", ping_payload), ("message", b''.join(fragments), False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0], sync = True)
        self.p.sendFrame(opcode = 9, fin = True, payload = ping_payload, sync = True)
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1], sync = True)
        self.p.closeAfter(1)


# case5_8.py


class Case5_8(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments, one ping with payload in-between. Octets are sent in octet-wise chops."""

    EXPECTATION = """A pong is received, then the message is echo'ed back to us."""

    def onOpen(self):
        ping_payload = b"ping payload"
        fragments = [b"fragment1", b"fragment2"]
        self.expected[Case.OK] = [("pong", ping_payload), ("message", b''.join(fragments), False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0], chopsize = 1)
        self.p.sendFrame(opcode = 9, fin = True, payload = ping_payload, chopsize = 1)
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1], chopsize = 1)
        self.p.closeAfter(1)


# case5_9.py


class Case5_9(Case):
    DESCRIPTION = """Send unfragmented Text Message after Continuation Frame with FIN = true, where there is nothing to continue, sent in one chop."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 0, fin = True, payload = b"non-continuation payload")
        self.p.sendFrame(opcode = 1, fin = True, payload = b"Hello, world!")
        self.p.killAfter(1)


# case5_10.py


class Case5_10(Case):
    DESCRIPTION = """Send unfragmented Text Message after Continuation Frame with FIN = true, where there is nothing to continue, sent in per-frame chops."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 0, fin = True, payload = b"non-continuation payload", sync = True)
        self.p.sendFrame(opcode = 1, fin = True, payload = b"Hello, world!", sync = True)
        self.p.killAfter(1)


# case5_11.py


class Case5_11(Case):
    DESCRIPTION = """Send unfragmented Text Message after Continuation Frame with FIN = true, where there is nothing to continue, sent in octet-wise chops."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 0, fin = True, payload = b"non-continuation payload", chopsize = 1)
        self.p.sendFrame(opcode = 1, fin = True, payload = b"Hello, world!", chopsize = 1)
        self.p.killAfter(1)


# case5_12.py


class Case5_12(Case):
    DESCRIPTION = """Send unfragmented Text Message after Continuation Frame with FIN = false, where there is nothing to continue, sent in one chop."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 0, fin = False, payload = b"non-continuation payload")
        self.p.sendFrame(opcode = 1, fin = True, payload = b"Hello, world!")
        self.p.killAfter(1)


# case5_13.py


class Case5_13(Case):
    DESCRIPTION = """Send unfragmented Text Message after Continuation Frame with FIN = false, where there is nothing to continue, sent in per-frame chops."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 0, fin = False, payload = b"non-continuation payload", sync = True)
        self.p.sendFrame(opcode = 1, fin = True, payload = b"Hello, world!", sync = True)
        self.p.killAfter(1)


# case5_14.py


class Case5_14(Case):
    DESCRIPTION = """Send unfragmented Text Message after Continuation Frame with FIN = false, where there is nothing to continue, sent in octet-wise chops."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 0, fin = False, payload = b"non-continuation payload", chopsize = 1)
        self.p.sendFrame(opcode = 1, fin = True, payload = b"Hello, world!", chopsize = 1)
        self.p.killAfter(1)


# case5_15.py


class Case5_15(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments, then Continuation Frame with FIN = false where there is nothing to continue, then unfragmented Text Message, all sent in one chop."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        fragments = [b"fragment1", b"fragment2", b"fragment3", b"fragment4"]
        self.expected[Case.OK] = [("message", b''.join(fragments[:2]), False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0])
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1])
        self.p.sendFrame(opcode = 0, fin = False, payload = fragments[2])
        self.p.sendFrame(opcode = 1, fin = True, payload = fragments[3])
        self.p.killAfter(1)


# case5_16.py


class Case5_16(Case):
    DESCRIPTION = """Repeated 2x: Continuation Frame with FIN = false (where there is nothing to continue), then text Message fragmented into 2 fragments."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        for i in range(0, 2):
            self.p.sendFrame(opcode = 0, fin = False, payload = b"fragment1")
            self.p.sendFrame(opcode = 1, fin = False, payload = b"fragment2")
            self.p.sendFrame(opcode = 0, fin = True, payload = b"fragment3")
        self.p.killAfter(1)


# case5_17.py


class Case5_17(Case):
    DESCRIPTION = """Repeated 2x: Continuation Frame with FIN = true (where there is nothing to continue), then text Message fragmented into 2 fragments."""

    EXPECTATION = """The connection is failed immediately, since there is no message to continue."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        for i in range(0, 2):
            self.p.sendFrame(opcode = 0, fin = True, payload = b"fragment1")
            self.p.sendFrame(opcode = 1, fin = False, payload = b"fragment2")
            self.p.sendFrame(opcode = 0, fin = True, payload = b"fragment3")
        self.p.killAfter(1)


# case5_18.py


class Case5_18(Case):
    DESCRIPTION = """Send text Message fragmented into 2 fragments, with both frame opcodes set to text, sent in one chop."""

    EXPECTATION = """The connection is failed immediately, since all data frames after the initial data frame must have opcode 0."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":False,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendFrame(opcode = 1, fin = False, payload = b"fragment1")
        self.p.sendFrame(opcode = 1, fin = True, payload = b"fragment2")
        self.p.killAfter(1)


# case5_19.py


class Case5_19(Case):
    DESCRIPTION = """A fragmented text message is sent in multiple frames. After
    sending the first 2 frames of the text message, a Ping is sent. Then we wait 1s,
    then we send 2 more text fragments, another Ping and then the final text fragment.
    Everything is legal."""

    EXPECTATION = """The peer immediately answers the first Ping before
    it has received the last text message fragment. The peer pong's back the Ping's
    payload exactly, and echo's the payload of the fragmented message back to us."""

    def init(self):
        self.sync = False

    def onOpen(self):
        self.fragments = [b"fragment1", b"fragment2", b"fragment3", b"fragment4", b"fragment5"]
        self.pings = [b"pongme 1!", b"pongme 2!"]

        self.expected[Case.OK] = [("pong", self.pings[0]), ("pong", self.pings[1]), ("message", b''.join(self.fragments), False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}

        self.p.sendFrame(opcode = 1, fin = False, payload = self.fragments[0], sync = self.sync)
        self.p.sendFrame(opcode = 0, fin = False, payload = self.fragments[1], sync = self.sync)
        self.p.sendFrame(opcode = 9, fin = True, payload = self.pings[0], sync = self.sync)
        self.p.continueLater(1, self.part2)

    def part2(self):
        self.p.sendFrame(opcode = 0, fin = False, payload = self.fragments[2], sync = self.sync)
        self.p.sendFrame(opcode = 0, fin = False, payload = self.fragments[3], sync = self.sync)
        self.p.sendFrame(opcode = 9, fin = True, payload = self.pings[1], sync = self.sync)
        self.p.sendFrame(opcode = 0, fin = True, payload = self.fragments[4], sync = self.sync)
        self.p.closeAfter(1)


# case5_20.py


class Case5_20(Case5_19):
    DESCRIPTION = """Same as Case 5.19, but send all frames with SYNC = True.
    Note, this does not change the octets sent in any way, only how the stream
    is chopped up on the wire."""

    EXPECTATION = """Same as Case 5.19. Implementations must be agnostic to how
    octet stream is chopped up on wire (must be TCP clean)."""

    def init(self):
        self.sync = True
