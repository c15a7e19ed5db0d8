"""Autobahn|Testsuite cases 7.x (Close Handling), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case7_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

from .case import Case


# case7_1_1.py


class Case7_1_1(Case):
    DESCRIPTION = """Send a message followed by a close frame"""

    EXPECTATION = """Echoed message followed by clean close with normal code."""

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        payload = b"Hello World!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = payload)
        #self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL);
        #self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(1)


# case7_1_2.py


class Case7_1_2(Case):
    DESCRIPTION = """Send two close frames"""

    EXPECTATION = """Clean close with normal code. Second close frame ignored."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        payload = b"Hello World!"
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.sendFrame(opcode = 8)
        self.p.killAfter(1)


# case7_1_3.py


class Case7_1_3(Case):
    DESCRIPTION = """Send a ping after close message"""

    EXPECTATION = """Clean close with normal code, no pong."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        payload = b"Hello World!"
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        #self.p.sendFrame(opcode = 1, payload = payload)
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.sendFrame(opcode = 9)
        self.p.killAfter(1)


# case7_1_4.py


class Case7_1_4(Case):
    DESCRIPTION = """Send text message after sending a close frame."""

    EXPECTATION = """Clean close with normal code. Text message ignored."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        payload = b"Hello World!"
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.killAfter(1)


# case7_1_5.py


class Case7_1_5(Case):
    DESCRIPTION = """Send message fragment1 followed by close then fragment"""

    EXPECTATION = """Clean close with normal code."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        fragments = [b"fragment1", b"fragment2"]
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, fin = False, payload = fragments[0])
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.sendFrame(opcode = 0, fin = True, payload = fragments[1])
        self.p.killAfter(1)


# case7_1_6.py


class Case7_1_6(Case):
    DESCRIPTION = """Send 256K message followed by close then a ping"""

    EXPECTATION = """Case outcome depends on implementation defined close behavior. Message and close frame are sent back to back. If the close frame is processed before the text message write is complete (as can happen in asynchronous processing models) the close frame is processed first and the text message may not be received or may only be partially received."""

    def init(self):
        self.suppressClose = True
        self.DATALEN = 256 * 2**10
        self.PAYLOAD = b"BAsd7&jh23"

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        self.passed = True


        if self.behavior == Case.OK:
            self.result = "Text message was processed before close."
        elif self.behavior == Case.NON_STRICT:
            self.result = "Close was processed before text message could be returned."

        self.behavior = Case.INFORMATIONAL
        self.behaviorClose = Case.INFORMATIONAL

    def onOpen(self):
        payload = b"Hello World!"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expected[Case.NON_STRICT] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendFrame(opcode = 1, payload = self.PAYLOAD, payload_len = self.DATALEN)
        self.p.sendFrame(opcode = 1, payload = payload)
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.sendFrame(opcode = 9)
        self.p.killAfter(1)


# case7_3_1.py


class Case7_3_1(Case):
    DESCRIPTION = """Send a close frame with payload length 0 (no close code, no close reason)"""

    EXPECTATION = """Clean close with normal code."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendCloseFrame()
        self.p.killAfter(1)


# case7_3_2.py


class Case7_3_2(Case):
    DESCRIPTION = """Send a close frame with payload length 1"""

    EXPECTATION = """Clean close with protocol error or drop TCP."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendCloseFrame(reasonUtf8 = b"a")
        self.p.killAfter(1)


# case7_3_3.py


class Case7_3_3(Case):
    DESCRIPTION = """Send a close frame with payload length 2 (regular close with a code)"""

    EXPECTATION = """Clean close with normal code."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL)
        self.p.killAfter(1)


# case7_3_4.py


class Case7_3_4(Case):
    DESCRIPTION = """Send a close frame with close code and close reason"""

    EXPECTATION = """Clean close with normal code."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose
    def onOpen(self):
        self.payload = u"Hello World!"
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL,self.payload)
        self.p.killAfter(1)


# case7_3_5.py


class Case7_3_5(Case):
    DESCRIPTION = """Send a close frame with close code and close reason of maximum length (123)"""

    EXPECTATION = """Clean close with normal code."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        self.payload = u"*" * 123
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL],"requireClean":True}
        self.p.sendClose(self.p.CLOSE_STATUS_CODE_NORMAL,self.payload)
        self.p.killAfter(1)


# case7_3_6.py


class Case7_3_6(Case):
    DESCRIPTION = """Send a close frame with close code and close reason which is too long (124) - total frame payload 126 octets"""

    EXPECTATION = """Clean close with protocol error code or dropped TCP connection."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

    def onOpen(self):
        self.payload = b"*" * 124
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendCloseFrame(self.p.CLOSE_STATUS_CODE_NORMAL, reasonUtf8 = self.payload)
        self.p.killAfter(1)


# case7_5_1.py


class Case7_5_1(Case):
    DESCRIPTION = """Send a close frame with invalid UTF8 payload"""

    EXPECTATION = """Clean close with protocol error or invalid utf8 code or dropped TCP."""

    def init(self):
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

        ## the close reason we sent was invalid UTF8, so we
        ## convert to HEX representation for later case reporting
        if self.p.localCloseReason:
            self.p.localCloseReason = self.p.localCloseReason.hex()
        else:
            self.p.localCloseReason = "?"

    def onOpen(self):
        self.payload = b'\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64'
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR,self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],"requireClean":False}
        #self.p.sendFrame(opcode = 8,payload = self.payload)
        self.p.sendCloseFrame(self.p.CLOSE_STATUS_CODE_NORMAL, reasonUtf8 = self.payload)
        self.p.killAfter(1)


# case7_7_X.py


## list of some valid close codes
tests = [1000,1001,1002,1003,1007,1008,1009,1010,1011,3000,3999,4000,4999]

Case7_7_X = []

def __init__(self, protocol):
    Case.__init__(self, protocol)

def onOpen(self):
    self.expected[Case.OK] = []
    self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL,self.CLOSE_CODE],"requireClean":True}
    self.p.sendCloseFrame(self.CLOSE_CODE)
    self.p.killAfter(1)

def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

i = 1
for s in tests:
    DESCRIPTION = """Send close with valid close code %d""" % s
    EXPECTATION = """Clean close with normal or echoed code"""
    C = type("Case7_7_%d" % i,
            (Case,),
            {"CLOSE_CODE": s,
          "DESCRIPTION": """%s""" % DESCRIPTION,
          "EXPECTATION": """%s""" % EXPECTATION,
          "__init__": __init__,
          "onOpen": onOpen,
          "onConnectionLost": onConnectionLost,
          })
    Case7_7_X.append(C)
    i += 1


# case7_9_X.py


## list of some invalid close codes
tests = [0,999,1004,1005,1006,1016,1100,2000,2999]

Case7_9_X = []

def __init__(self, protocol):
    Case.__init__(self, protocol)

def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        if self.behaviorClose == Case.WRONG_CODE:
            self.behavior = Case.FAILED
            self.passed = False
            self.result = self.resultClose

def onOpen(self):
    self.expected[Case.OK] = []
    self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
    self.p.sendCloseFrame(self.CLOSE_CODE)
    self.p.killAfter(1)

i = 1
for s in tests:
    DESCRIPTION = """Send close with invalid close code %d""" % s
    EXPECTATION = """Clean close with protocol error code or drop TCP"""
    C = type("Case7_9_%d" % i,
                (Case,),
                {"CLOSE_CODE": s,
             "DESCRIPTION": """%s""" % DESCRIPTION,
             "EXPECTATION": """%s""" % EXPECTATION,
             "__init__": __init__,
             "onOpen": onOpen,
             "onConnectionLost": onConnectionLost,
             })
    Case7_9_X.append(C)
    i += 1


# case7_13_1.py


class Case7_13_1(Case):
    DESCRIPTION = """Send close with close code 5000"""

    EXPECTATION = """Actual events are undefined by the spec."""

    def init(self):
        self.code = 5000
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        self.passed = True
        self.behavior = Case.INFORMATIONAL
        self.behaviorClose = Case.INFORMATIONAL
        self.result = "Actual events are undefined by the spec."

    def onOpen(self):
        self.payload = b'\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64'
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL,self.code,self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendCloseFrame(self.code)
        self.p.killAfter(1)


# case7_13_2.py


class Case7_13_2(Case):
    DESCRIPTION = """Send close with close code 65535"""

    EXPECTATION = """Actual events are undefined by the spec."""

    def init(self):
        self.code = 65535
        self.suppressClose = True

    def onConnectionLost(self, failedByMe):
        Case.onConnectionLost(self, failedByMe)

        self.passed = True
        self.behavior = Case.INFORMATIONAL
        self.behaviorClose = Case.INFORMATIONAL
        self.result = "Actual events are undefined by the spec."

    def onOpen(self):
        self.payload = b'\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64'
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe":True,"closeCode":[self.p.CLOSE_STATUS_CODE_NORMAL,self.code,self.p.CLOSE_STATUS_CODE_PROTOCOL_ERROR],"requireClean":False}
        self.p.sendCloseFrame(self.code)
        self.p.killAfter(1)
