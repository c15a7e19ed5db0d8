"""Autobahn|Testsuite cases 9.x (Limits/Performance), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case9_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case9_1_1.py


class Case9_1_1(Case):
    DESCRIPTION = """Send text message message with payload of length 64 * 2**10 (64k)."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 64 * 2**10
        self.PAYLOAD = b"BAsd7&jh23"
        self.WAITSECS = 10
        self.reportTime = True

    def onOpen(self):
        self.p.createWirelog = False
        self.behavior = Case.FAILED

        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}

        self.result = "Did not receive message within %d seconds." % self.WAITSECS
        self.p.sendFrame(opcode = 1, payload = self.PAYLOAD, payload_len = self.DATALEN)
        self.p.closeAfter(self.WAITSECS)

    def onMessage(self, msg, binary):
        if binary:
            self.result = "Expected text message with payload, but got binary."
        else:
            if len(msg) != self.DATALEN:
                self.result = "Expected text message with payload of length %d, but got %d." % (self.DATALEN, len(msg))
            else:
                ## FIXME : check actual content
                ##
                self.behavior = Case.OK
                self.result = "Received text message of length %d." % len(msg)
        self.p.createWirelog = True
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)


# case9_1_2.py


class Case9_1_2(Case9_1_1):
    DESCRIPTION = """Send text message message with payload of length 256 * 2**10 (256k)."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 256 * 2**10
        self.PAYLOAD = b"BAsd7&jh23"
        self.WAITSECS = 10
        self.reportTime = True


# case9_1_3.py


class Case9_1_3(Case9_1_1):
    DESCRIPTION = """Send text message message with payload of length 1 * 2**20 (1M)."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 1 * 2**20
        self.PAYLOAD = b"BAsd7&jh23"
        self.WAITSECS = 100
        self.reportTime = True


# case9_1_4.py


class Case9_1_4(Case9_1_1):
    DESCRIPTION = """Send text message message with payload of length 4 * 2**20 (4M)."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.PAYLOAD = b"BAsd7&jh23"
        self.WAITSECS = 100
        self.reportTime = True


# case9_1_5.py


class Case9_1_5(Case9_1_1):
    DESCRIPTION = """Send text message message with payload of length 8 * 2**20 (8M)."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 8 * 2**20
        self.PAYLOAD = b"BAsd7&jh23"
        self.WAITSECS = 100
        self.reportTime = True


# case9_1_6.py


class Case9_1_6(Case9_1_1):
    DESCRIPTION = """Send text message message with payload of length 16 * 2**20 (16M)."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 16 * 2**20
        self.PAYLOAD = b"BAsd7&jh23"
        self.WAITSECS = 100
        self.reportTime = True


# case9_2_1.py


class Case9_2_1(Case):
    DESCRIPTION = """Send binary message message with payload of length 64 * 2**10 (64k)."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 64 * 2**10
        self.PAYLOAD = b"\x00\xfe\x23\xfa\xf0"
        self.WAITSECS = 10
        self.reportTime = True

    def onOpen(self):
        self.p.createWirelog = False
        self.behavior = Case.FAILED
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.result = "Did not receive message within %d seconds." % self.WAITSECS
        self.p.sendFrame(opcode = 2, payload = self.PAYLOAD, payload_len = self.DATALEN)
        self.p.closeAfter(self.WAITSECS)

    def onMessage(self, msg, binary):
        if not binary:
            self.result = "Expected binary message with payload, but got text."
        else:
            if len(msg) != self.DATALEN:
                self.result = "Expected binary message with payload of length %d, but got %d." % (self.DATALEN, len(msg))
            else:
                ## FIXME : check actual content
                ##
                self.behavior = Case.OK
                self.result = "Received binary message of length %d." % len(msg)
        self.p.createWirelog = True
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)


# case9_2_2.py


class Case9_2_2(Case9_2_1):
    DESCRIPTION = """Send binary message message with payload of length 256 * 2**10 (256k)."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 256 * 2**10
        self.PAYLOAD = b"\x00\xfe\x23\xfa\xf0"
        self.WAITSECS = 10
        self.reportTime = True


# case9_2_3.py


class Case9_2_3(Case9_2_1):
    DESCRIPTION = """Send binary message message with payload of length 1 * 2**20 (1M)."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 1 * 2**20
        self.PAYLOAD = b"\x00\xfe\x23\xfa\xf0"
        self.WAITSECS = 10
        self.reportTime = True


# case9_2_4.py


class Case9_2_4(Case9_2_1):
    DESCRIPTION = """Send binary message message with payload of length 4 * 2**20 (4M)."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.PAYLOAD = b"\x00\xfe\x23\xfa\xf0"
        self.WAITSECS = 10
        self.reportTime = True


# case9_2_5.py


class Case9_2_5(Case9_2_1):
    DESCRIPTION = """Send binary message message with payload of length 8 * 2**20 (16M)."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 8 * 2**20
        self.PAYLOAD = b"\x00\xfe\x23\xfa\xf0"
        self.WAITSECS = 100
        self.reportTime = True


# case9_2_6.py


class Case9_2_6(Case9_2_1):
    DESCRIPTION = """Send binary message message with payload of length 16 * 2**20 (16M)."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 16 * 2**20
        self.PAYLOAD = b"\x00\xfe\x23\xfa\xf0"
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_1.py


class Case9_3_1(Case):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 64."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 64
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True

    def onOpen(self):
        self.p.createWirelog = False
        self.behavior = Case.FAILED
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.result = "Did not receive message within %d seconds." % self.WAITSECS
        self.p.sendMessage(payload = self.PAYLOAD, isBinary = False, fragmentSize = self.FRAGSIZE)
        self.p.closeAfter(self.WAITSECS)

    def onMessage(self, payload, isBinary):
        if isBinary:
            self.result = "Expected text message with payload, but got binary."
        else:
            if len(payload) != self.DATALEN:
                self.result = "Expected text message with payload of length %d, but got %d." % (self.DATALEN, len(payload))
            else:
                ## FIXME : check actual content
                ##
                self.behavior = Case.OK
                self.result = "Received text message of length %d." % len(payload)
        self.p.createWirelog = True
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)


# case9_3_2.py


class Case9_3_2(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 256."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 256
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_3.py


class Case9_3_3(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 1k."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 1 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_4.py


class Case9_3_4(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 4k."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 4 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_5.py


class Case9_3_5(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 16k."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 16 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_6.py


class Case9_3_6(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 64k."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 64 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_7.py


class Case9_3_7(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 256k."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 256 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_8.py


class Case9_3_8(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 1M."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 1 * 2**20
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_3_9.py


class Case9_3_9(Case9_3_1):
    DESCRIPTION = """Send fragmented text message message with message payload of length 4 * 2**20 (8M). Sent out in fragments of 4M."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 4 * 2**20
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_1.py


class Case9_4_1(Case):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 64."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 64
        self.PAYLOAD = b"\xfe" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True

    def onOpen(self):
        self.p.createWirelog = False
        self.behavior = Case.FAILED
        self.result = "Did not receive message within %d seconds." % self.WAITSECS
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendMessage(payload = self.PAYLOAD, isBinary = True, fragmentSize = self.FRAGSIZE)
        self.p.closeAfter(self.WAITSECS)

    def onMessage(self, payload, isBinary):
        if not isBinary:
            self.result = "Expected binary message with payload, but got binary."
        else:
            if len(payload) != self.DATALEN:
                self.result = "Expected binary message with payload of length %d, but got %d." % (self.DATALEN, len(payload))
            else:
                ## FIXME : check actual content
                ##
                self.behavior = Case.OK
                self.result = "Received binary message of length %d." % len(payload)
        self.p.createWirelog = True
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)


# case9_4_2.py


class Case9_4_2(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 256."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 256
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_3.py


class Case9_4_3(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 1k."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 1 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_4.py


class Case9_4_4(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 4k."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 4 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_5.py


class Case9_4_5(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 16k."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 16 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_6.py


class Case9_4_6(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 64k."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 64 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_7.py


class Case9_4_7(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 256k."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 256 * 2**10
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_8.py


class Case9_4_8(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 1M."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 1 * 2**20
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_4_9.py


class Case9_4_9(Case9_4_1):
    DESCRIPTION = """Send fragmented binary message message with message payload of length 4 * 2**20 (4M). Sent out in fragments of 4M."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def init(self):
        self.DATALEN = 4 * 2**20
        self.FRAGSIZE = 4 * 2**20
        self.PAYLOAD = b"*" * self.DATALEN
        self.WAITSECS = 100
        self.reportTime = True


# case9_5_1.py


class Case9_5_1(Case):
    DESCRIPTION = """Send text message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 64 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 64

    def init(self):
        self.DATALEN = 1 * 2**20
        self.PAYLOAD = b"BAsd7&jh23"
        self.WAITSECS = 1000
        self.reportTime = True
        self.setChopSize()

    def onOpen(self):
        self.p.createWirelog = False
        self.behavior = Case.FAILED
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.result = "Did not receive message within %d seconds." % self.WAITSECS
        self.p.sendFrame(opcode = 1, payload = self.PAYLOAD, payload_len = self.DATALEN, chopsize = self.chopsize)
        self.p.closeAfter(self.WAITSECS)

    def onMessage(self, msg, binary):
        if binary:
            self.result = "Expected text message with payload, but got binary."
        else:
            if len(msg) != self.DATALEN:
                self.result = "Expected text message with payload of length %d, but got %d." % (self.DATALEN, len(msg))
            else:
                ## FIXME : check actual content
                ##
                self.behavior = Case.OK
                self.result = "Received text message of length %d." % len(msg)
        self.p.createWirelog = True
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)


# case9_5_2.py


class Case9_5_2(Case9_5_1):
    DESCRIPTION = """Send text message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 128 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 128


# case9_5_3.py


class Case9_5_3(Case9_5_1):
    DESCRIPTION = """Send text message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 256 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 256


# case9_5_4.py


class Case9_5_4(Case9_5_1):
    DESCRIPTION = """Send text message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 512 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 512


# case9_5_5.py


class Case9_5_5(Case9_5_1):
    DESCRIPTION = """Send text message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 1024 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 1024


# case9_5_6.py


class Case9_5_6(Case9_5_1):
    DESCRIPTION = """Send text message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 2048 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 2048


# case9_6_1.py


class Case9_6_1(Case):
    DESCRIPTION = """Send binary message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 64 octets."""

    EXPECTATION = """Receive echo'ed binary message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 64

    def init(self):
        self.DATALEN = 1 * 2**20
        self.PAYLOAD = b"\x00\xfe\x23\xfa\xf0"
        self.WAITSECS = 1000
        self.reportTime = True
        self.setChopSize()

    def onOpen(self):
        self.p.createWirelog = False
        self.behavior = Case.FAILED
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.result = "Did not receive message within %d seconds." % self.WAITSECS
        self.p.sendFrame(opcode = 2, payload = self.PAYLOAD, payload_len = self.DATALEN, chopsize = self.chopsize)
        self.p.closeAfter(self.WAITSECS)

    def onMessage(self, msg, binary):
        if not binary:
            self.result = "Expected binary message with payload, but got text."
        else:
            if len(msg) != self.DATALEN:
                self.result = "Expected binary message with payload of length %d, but got %d." % (self.DATALEN, len(msg))
            else:
                ## FIXME : check actual content
                ##
                self.behavior = Case.OK
                self.result = "Received binary message of length %d." % len(msg)
        self.p.createWirelog = True
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)


# case9_6_2.py


class Case9_6_2(Case9_6_1):
    DESCRIPTION = """Send binary message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 128 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 128


# case9_6_3.py


class Case9_6_3(Case9_6_1):
    DESCRIPTION = """Send binary message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 256 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 256


# case9_6_4.py


class Case9_6_4(Case9_6_1):
    DESCRIPTION = """Send binary message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 512 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 512


# case9_6_5.py


class Case9_6_5(Case9_6_1):
    DESCRIPTION = """Send binary message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 1024 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 1024


# case9_6_6.py


class Case9_6_6(Case9_6_1):
    DESCRIPTION = """Send binary message message with payload of length 1 * 2**20 (1M). Sent out data in chops of 2048 octets."""

    EXPECTATION = """Receive echo'ed text message (with payload as sent)."""

    def setChopSize(self):
        self.chopsize = 2048


# case9_7_X.py


## list of (payload length, message count, case timeout)
tests = [(0, 1000, 60),
            (16, 1000, 60),
            (64, 1000, 60),
            (256, 1000, 120),
            (1024, 1000, 240),
            (4096, 1000, 480)]

Case9_7_X = []
Case9_8_X = []


def __init__(self, protocol):
    Case.__init__(self, protocol)
    self.reportTime = True

def onOpen(self):
    self.p.enableWirelog(False)
    self.behavior = Case.FAILED
    self.expectedClose = {"closedByMe": True, "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL], "requireClean": True}
    self.result = "Case did not finish within %d seconds." % self.WAITSECS
    self.p.closeAfter(self.WAITSECS)
    self.count = 0
    self.sendOne()

def sendOne(self):
    if self.BINARY:
        self.p.sendFrame(opcode = 2, payload = b"\xfe", payload_len = self.LEN)
    else:
        self.p.sendFrame(opcode = 1, payload = b"*", payload_len = self.LEN)
    self.count += 1

def onMessage(self, msg, binary):
    if binary != self.BINARY or len(msg) != self.LEN:
        self.behavior = Case.FAILED
        self.result = "Echo'ed message type or length differs from what I sent (got binary = %s, payload length = %s)." % (binary, len(msg))
        self.p.enableWirelog(True)
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
    elif self.count < self.COUNT:
        self.sendOne()
    else:
        self.behavior = Case.OK
        self.result = "Ok, received all echo'ed messages in time."
        self.p.enableWirelog(True)
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)

for b in [False, True]:
    i = 1
    for s in tests:
        if b:
            mt = "binary"
            cc = "Case9_8_%d"
        else:
            mt = "text"
            cc = "Case9_7_%d"
        DESCRIPTION = """Send %d %s messages of payload size %d to measure implementation/network RTT (round trip time) / latency.""" % (s[1], mt, s[0])
        EXPECTATION = """Receive echo'ed %s messages (with payload as sent). Timeout case after %d secs.""" % (mt, s[2])
        C = type(cc % i,
                (Case,),
                {"LEN": s[0],
                 "COUNT": s[1],
                 "WAITSECS": s[2],
                 "BINARY": b,
                 "DESCRIPTION": """%s""" % DESCRIPTION,
                 "EXPECTATION": """%s""" % EXPECTATION,
                 "__init__": __init__,
                 "onOpen": onOpen,
                 "onMessage": onMessage,
                 "sendOne": sendOne,
                 })
        if b:
            Case9_8_X.append(C)
        else:
            Case9_7_X.append(C)
        i += 1


# case9_9_1.py is not ported: upstream's case list has it commented out
# ("#Cases += [Case9_9_1]"), so wstest never runs it.
