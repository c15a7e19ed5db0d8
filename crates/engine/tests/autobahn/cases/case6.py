"""Autobahn|Testsuite cases 6.x (UTF-8 Handling), ported to Python 3.

From autobahntestsuite 25.10.1, autobahntestsuite/case/case6_*.py
(Copyright (c) typedef int GmbH, Apache License 2.0), one upstream file
after the other, each under a comment naming it. What changed: payloads are
bytes literals, xrange is range, 4-space indents; see README.md.
"""

import codecs

from .case import Case
# The cases read the connection's state names off autobahn's class.
from fuzzer import FuzzingClient as WebSocketProtocol


def b2a_hex(data):
    """binascii.b2a_hex, as text (Python 2 gave a str)."""
    return data.hex()


class Utf8Validator:
    """autobahn's incremental UTF-8 validator (Hoehrmann's DFA), as far as
    case6_x_x.py uses it: validate() says whether the bytes so far are
    valid and whether they end on a code point boundary. Python's strict
    UTF-8 codec refuses what the DFA refuses (overlong forms, surrogates,
    code points past U+10FFFF)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.consumed = 0

    def validate(self, data):
        try:
            self.decoder.decode(data, final=False)
        except UnicodeDecodeError:
            return False, False, 0, self.consumed
        self.consumed += len(data)
        return True, self.decoder.getstate()[0] == b"", len(data), self.consumed


# case6_1_1.py


class Case6_1_1(Case):
    DESCRIPTION = """Send text message of length 0."""

    EXPECTATION = """A message is echo'ed back to us (with empty payload)."""

    def onOpen(self):
        self.expected[Case.OK] = [("message", b"", False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
        self.p.sendFrame(opcode = 1, payload = b"")
        self.p.closeAfter(1)


# case6_1_2.py


class Case6_1_2(Case):
    DESCRIPTION = """Send fragmented text message, 3 fragments each of length 0."""

    EXPECTATION = """A message is echo'ed back to us (with empty payload)."""

    def onOpen(self):
        self.expected[Case.OK] = [("message", b"", False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
        self.p.sendFrame(opcode = 1, fin = False, payload = b"")
        self.p.sendFrame(opcode = 0, fin = False, payload = b"")
        self.p.sendFrame(opcode = 0, fin = True, payload = b"")
        self.p.closeAfter(1)


# case6_1_3.py


class Case6_1_3(Case):
    DESCRIPTION = """Send fragmented text message, 3 fragments, first and last of length 0, middle non-empty."""

    EXPECTATION = """A message is echo'ed back to us (with payload = payload of middle fragment)."""

    def onOpen(self):
        payload = b"middle frame payload"
        self.expected[Case.OK] = [("message", payload, False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
        self.p.sendFrame(opcode = 1, fin = False, payload = b"")
        self.p.sendFrame(opcode = 0, fin = False, payload = payload)
        self.p.sendFrame(opcode = 0, fin = True, payload = b"")
        self.p.closeAfter(1)


# case6_2_1.py


class Case6_2_1(Case):
    PAYLOAD = "Hello-µ@ßöäüàá-UTF-8!!".encode("utf-8")

    DESCRIPTION = """Send a valid UTF-8 text message in one fragment.<br><br>MESSAGE:<br>%s<br>%s""" % (PAYLOAD.decode("utf-8", "replace"), b2a_hex(PAYLOAD))

    EXPECTATION = """The message is echo'ed back to us."""

    def onOpen(self):
        self.expected[Case.OK] = [("message", self.PAYLOAD, False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
        self.p.sendMessage(self.PAYLOAD, isBinary = False)
        self.p.closeAfter(1)


# case6_2_2.py


class Case6_2_2(Case):
    PAYLOAD1 = "Hello-µ@ßöä".encode("utf-8")
    PAYLOAD2 = "üàá-UTF-8!!".encode("utf-8")

    DESCRIPTION = """Send a valid UTF-8 text message in two fragments, fragmented on UTF-8 code point boundary.<br><br>MESSAGE FRAGMENT 1:<br>%s<br>%s<br><br>MESSAGE FRAGMENT 2:<br>%s<br>%s""" % (PAYLOAD1.decode("utf-8"), b2a_hex(PAYLOAD1), PAYLOAD2.decode("utf-8"), b2a_hex(PAYLOAD2))

    EXPECTATION = """The message is echo'ed back to us."""

    def onOpen(self):
        self.expected[Case.OK] = [("message", self.PAYLOAD1 + self.PAYLOAD2, False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
        self.p.sendFrame(opcode = 1, fin = False, payload = self.PAYLOAD1)
        self.p.sendFrame(opcode = 0, fin = True, payload = self.PAYLOAD2)
        self.p.closeAfter(1)


# case6_2_3.py


class Case6_2_3(Case):
    PAYLOAD = "Hello-µ@ßöäüàá-UTF-8!!".encode("utf-8")

    DESCRIPTION = """Send a valid UTF-8 text message in fragments of 1 octet, resulting in frames ending on positions which are not code point ends.<br><br>MESSAGE:<br>%s<br>%s""" % (PAYLOAD.decode("utf-8", "replace"), b2a_hex(PAYLOAD))

    EXPECTATION = """The message is echo'ed back to us."""

    def onOpen(self):
        self.expected[Case.OK] = [("message", self.PAYLOAD, False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
        self.p.sendMessage(self.PAYLOAD, isBinary = False, fragmentSize = 1)
        self.p.closeAfter(1)


# case6_2_4.py


class Case6_2_4(Case):
    PAYLOAD = b'\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5'

    DESCRIPTION = """Send a valid UTF-8 text message in fragments of 1 octet, resulting in frames ending on positions which are not code point ends.<br><br>MESSAGE:<br>%s<br>%s""" % (PAYLOAD.decode("utf-8", "replace"), b2a_hex(PAYLOAD))

    EXPECTATION = """The message is echo'ed back to us."""

    def onOpen(self):
        self.expected[Case.OK] = [("message", self.PAYLOAD, False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
        self.p.sendMessage(self.PAYLOAD, isBinary = False, fragmentSize = 1)
        self.p.closeAfter(1)


# case6_3_1.py


class Case6_3_1(Case):
    # invalid exactly on byte 12 (\xa0)
    PAYLOAD1 = b'\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5'
    PAYLOAD2 = b'\xed\xa0\x80'
    PAYLOAD3 = b'\x65\x64\x69\x74\x65\x64'
    PAYLOAD = PAYLOAD1 + PAYLOAD2 + PAYLOAD3

    DESCRIPTION = """Send invalid UTF-8 text message unfragmented.<br><br>MESSAGE:<br>%s""" % b2a_hex(PAYLOAD)

    EXPECTATION = """The connection is failed immediately, since the payload is not valid UTF-8."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],
                            "requireClean": False,
                            "closedByWrongEndpointIsFatal": True}
        self.p.sendMessage(self.PAYLOAD, isBinary = False)
        self.p.killAfter(1)


# case6_3_2.py


class Case6_3_2(Case6_3_1):
    DESCRIPTION = """Send invalid UTF-8 text message in fragments of 1 octet, resulting in frames ending on positions which are not code point ends.<br><br>MESSAGE:<br>%s""" % b2a_hex(Case6_3_1.PAYLOAD)

    EXPECTATION = """The connection is failed immediately, since the payload is not valid UTF-8."""

    def onOpen(self):
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],
                            "requireClean": False,
                            "closedByWrongEndpointIsFatal": True}
        self.p.sendMessage(self.PAYLOAD, isBinary = False, fragmentSize = 1)
        self.p.killAfter(1)


# case6_4_1.py


class Case6_4_1(Case):
    PAYLOAD1 = b'\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5'
    #PAYLOAD2 = '\xed\xa0\x80' # invalid exactly on byte 12 (\xa0)
    PAYLOAD2 = b'\xf4\x90\x80\x80' #invalid exactly on byte 12 (\x90)
    PAYLOAD3 = b'\x65\x64\x69\x74\x65\x64'
    PAYLOAD = PAYLOAD1 + PAYLOAD2 + PAYLOAD3

    DESCRIPTION = """Send invalid UTF-8 text message in 3 fragments (frames).
First frame payload is valid, then wait, then 2nd frame which contains the payload making the sequence invalid, then wait, then 3rd frame with rest.
Note that PART1 and PART3 are valid UTF-8 in themselves, PART2 is a 0x110000 encoded as in the UTF-8 integer encoding scheme, but the codepoint is invalid (out of range).
<br><br>MESSAGE PARTS:<br>
PART1 = %s<br>
PART2 = %s<br>
PART3 = %s<br>
""" % (b2a_hex(PAYLOAD1), b2a_hex(PAYLOAD2), b2a_hex(PAYLOAD3))

    EXPECTATION = """The first frame is accepted, we expect to timeout on the first wait. The 2nd frame should be rejected immediately (fail fast on UTF-8). If we timeout, we expect the connection is failed at least then, since the complete message payload is not valid UTF-8."""

    def onOpen(self):
        self.expected[Case.OK] = [("timeout", "A")]
        self.expected[Case.NON_STRICT] = [("timeout", "A"), ("timeout", "B")]

        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],
                            "requireClean": False,
                            "closedByWrongEndpointIsFatal": True}

        self.p.sendFrame(opcode = 1, fin = False, payload = self.PAYLOAD1)
        self.p.continueLater(1, self.part2, "A")

    def part2(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "A"))
            self.p.sendFrame(opcode = 0, fin = False, payload = self.PAYLOAD2)
            self.p.continueLater(1, self.part3, "B")

    def part3(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "B"))
            self.p.sendFrame(opcode = 0, fin = True, payload = self.PAYLOAD3)
            self.p.killAfter(1)


# case6_4_2.py


class Case6_4_2(Case6_4_1):
    DESCRIPTION = """Same as Case 6.4.1, but in 2nd frame, we send only up to and including the octet making the complete payload invalid.
<br><br>MESSAGE PARTS:<br>
PART1 = %s<br>
PART2 = %s<br>
PART3 = %s<br>
""" % (b2a_hex(Case6_4_1.PAYLOAD[:12]), b2a_hex(Case6_4_1.PAYLOAD[12:13]), b2a_hex(Case6_4_1.PAYLOAD[13:]))

    EXPECTATION = """The first frame is accepted, we expect to timeout on the first wait. The 2nd frame should be rejected immediately (fail fast on UTF-8). If we timeout, we expect the connection is failed at least then, since the complete message payload is not valid UTF-8."""

    def onOpen(self):
        self.expected[Case.OK] = [("timeout", "A")]
        self.expected[Case.NON_STRICT] = [("timeout", "A"), ("timeout", "B")]

        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],
                            "requireClean": False,
                            "closedByWrongEndpointIsFatal": True}

        self.p.sendFrame(opcode = 1, fin = False, payload = self.PAYLOAD[:12])
        self.p.continueLater(1, self.part2, "A")

    def part2(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "A"))
            self.p.sendFrame(opcode = 0, fin = False, payload = self.PAYLOAD[12:13])
            self.p.continueLater(1, self.part3, "B")

    def part3(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "B"))
            self.p.sendFrame(opcode = 0, fin = True, payload = self.PAYLOAD[13:])
            self.p.killAfter(1)


# case6_4_3.py


class Case6_4_3(Case6_4_1):
    DESCRIPTION = """Same as Case 6.4.1, but we send message not in 3 frames, but in 3 chops of the same message frame.
<br><br>MESSAGE PARTS:<br>
PART1 = %s<br>
PART2 = %s<br>
PART3 = %s<br>
""" % (b2a_hex(Case6_4_1.PAYLOAD1), b2a_hex(Case6_4_1.PAYLOAD2), b2a_hex(Case6_4_1.PAYLOAD3))

    EXPECTATION = """The first chop is accepted, we expect to timeout on the first wait. The 2nd chop should be rejected immediately (fail fast on UTF-8). If we timeout, we expect the connection is failed at least then, since the complete message payload is not valid UTF-8."""

    def onOpen(self):
        self.expected[Case.OK] = [("timeout", "A")]
        self.expected[Case.NON_STRICT] = [("timeout", "A"), ("timeout", "B")]

        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],
                            "requireClean": False,
                            "closedByWrongEndpointIsFatal": True}

        self.p.beginMessage()
        self.p.beginMessageFrame(len(self.PAYLOAD))
        self.p.sendMessageFrameData(self.PAYLOAD1)
        self.p.continueLater(1, self.part2, "A")

    def part2(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "A"))
            self.p.sendMessageFrameData(self.PAYLOAD2)
            self.p.continueLater(1, self.part3, "B")

    def part3(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "B"))
            self.p.sendMessageFrameData(self.PAYLOAD3)
            self.p.endMessage()
            self.p.killAfter(1)


# case6_4_4.py


class Case6_4_4(Case6_4_1):
    DESCRIPTION = """Same as Case 6.4.2, but we send message not in 3 frames, but in 3 chops of the same message frame.
<br><br>MESSAGE PARTS:<br>
PART1 = %s<br>
PART2 = %s<br>
PART3 = %s<br>
""" % (b2a_hex(Case6_4_1.PAYLOAD[:12]), b2a_hex(Case6_4_1.PAYLOAD[12:13]), b2a_hex(Case6_4_1.PAYLOAD3[13:]))

    EXPECTATION = """The first chop is accepted, we expect to timeout on the first wait. The 2nd chop should be rejected immediately (fail fast on UTF-8). If we timeout, we expect the connection is failed at least then, since the complete message payload is not valid UTF-8."""

    def onOpen(self):
        self.expected[Case.OK] = [("timeout", "A")]
        self.expected[Case.NON_STRICT] = [("timeout", "A"), ("timeout", "B")]

        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],
                            "requireClean": False,
                            "closedByWrongEndpointIsFatal": True}

        self.p.beginMessage()
        self.p.beginMessageFrame(len(self.PAYLOAD))
        self.p.sendMessageFrameData(self.PAYLOAD[:12])
        self.p.continueLater(1, self.part2, "A")

    def part2(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "A"))
            self.p.sendMessageFrameData(self.PAYLOAD[12:13])
            self.p.continueLater(1, self.part3, "B")

    def part3(self):
        if self.p.state == WebSocketProtocol.STATE_OPEN:
            self.received.append(("timeout", "B"))
            self.p.sendMessageFrameData(self.PAYLOAD[13:])
            self.p.endMessage()
            self.p.killAfter(1)


# case6_x_x.py


def createUtf8TestSequences():
    """
    Create test sequences for UTF-8 decoder tests from
    http://www.cl.cam.ac.uk/~mgk25/ucs/examples/UTF-8-test.txt
    """

    UTF8_TEST_SEQUENCES = []

    # 1 Some correct UTF-8 text
    vss = b'\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5'
    vs = ["Some valid UTF-8 sequences", []]
    vs[1].append((True, b'hello\x24world')) # U+0024
    vs[1].append((True, b'hello\xC2\xA2world')) # U+00A2
    vs[1].append((True, b'hello\xE2\x82\xACworld')) # U+20AC
    vs[1].append((True, b'hello\xF0\xA4\xAD\xA2world')) # U+24B62
    vs[1].append((True, vss))
    UTF8_TEST_SEQUENCES.append(vs)

    # All prefixes of correct UTF-8 text
    vs = ["All prefixes of a valid UTF-8 string that contains multi-byte code points", []]
    v = Utf8Validator()
    for i in range(1, len(vss) + 1):
        v.reset()
        res = v.validate(vss[:i])
        vs[1].append((res[0] and res[1], vss[:i]))
    UTF8_TEST_SEQUENCES.append(vs)

    # 2.1 First possible sequence of a certain length
    vs = ["First possible sequence of a certain length", []]
    vs[1].append((True, b'\x00'))
    vs[1].append((True, b'\xc2\x80'))
    vs[1].append((True, b'\xe0\xa0\x80'))
    vs[1].append((True, b'\xf0\x90\x80\x80'))
    UTF8_TEST_SEQUENCES.append(vs)

    # the following conform to the UTF-8 integer encoding scheme, but
    # valid UTF-8 only allows for Unicode code points up to U+10FFFF
    vs = ["First possible sequence length 5/6 (invalid codepoints)", []]
    vs[1].append((False, b'\xf8\x88\x80\x80\x80'))
    vs[1].append((False, b'\xfc\x84\x80\x80\x80\x80'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 2.2 Last possible sequence of a certain length
    vs = ["Last possible sequence of a certain length", []]
    vs[1].append((True, b'\x7f'))
    vs[1].append((True, b'\xdf\xbf'))
    vs[1].append((True, b'\xef\xbf\xbf'))
    vs[1].append((True, b'\xf4\x8f\xbf\xbf'))
    UTF8_TEST_SEQUENCES.append(vs)

    # the following conform to the UTF-8 integer encoding scheme, but
    # valid UTF-8 only allows for Unicode code points up to U+10FFFF
    vs = ["Last possible sequence length 4/5/6 (invalid codepoints)", []]
    vs[1].append((False, b'\xf7\xbf\xbf\xbf'))
    vs[1].append((False, b'\xfb\xbf\xbf\xbf\xbf'))
    vs[1].append((False, b'\xfd\xbf\xbf\xbf\xbf\xbf'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 2.3 Other boundary conditions
    vs = ["Other boundary conditions", []]
    vs[1].append((True, b'\xed\x9f\xbf'))
    vs[1].append((True, b'\xee\x80\x80'))
    vs[1].append((True, b'\xef\xbf\xbd'))
    vs[1].append((True, b'\xf4\x8f\xbf\xbf'))
    vs[1].append((False, b'\xf4\x90\x80\x80'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 3.1  Unexpected continuation bytes
    vs = ["Unexpected continuation bytes", []]
    vs[1].append((False, b'\x80'))
    vs[1].append((False, b'\xbf'))
    vs[1].append((False, b'\x80\xbf'))
    vs[1].append((False, b'\x80\xbf\x80'))
    vs[1].append((False, b'\x80\xbf\x80\xbf'))
    vs[1].append((False, b'\x80\xbf\x80\xbf\x80'))
    vs[1].append((False, b'\x80\xbf\x80\xbf\x80\xbf'))
    s = b""
    for i in range(0x80, 0xbf):
        s += bytes([i])
    vs[1].append((False, s))
    UTF8_TEST_SEQUENCES.append(vs)

    # 3.2  Lonely start characters
    vs = ["Lonely start characters", []]
    m = [(0xc0, 0xdf), (0xe0, 0xef), (0xf0, 0xf7), (0xf8, 0xfb), (0xfc, 0xfd)]
    for mm in m:
        s = b''
        for i in range(mm[0], mm[1]):
            s += bytes([i])
            s += bytes([0x20])
        vs[1].append((False, s))
    UTF8_TEST_SEQUENCES.append(vs)

    # 3.3  Sequences with last continuation byte missing
    vs = ["Sequences with last continuation byte missing", []]
    k = [b'\xc0', b'\xe0\x80', b'\xf0\x80\x80', b'\xf8\x80\x80\x80', b'\xfc\x80\x80\x80\x80',
        b'\xdf', b'\xef\xbf', b'\xf7\xbf\xbf', b'\xfb\xbf\xbf\xbf', b'\xfd\xbf\xbf\xbf\xbf']
    for kk in k:
        vs[1].append((False, kk))
    UTF8_TEST_SEQUENCES.append(vs)

    # 3.4  Concatenation of incomplete sequences
    vs = ["Concatenation of incomplete sequences", []]
    vs[1].append((False, b''.join(k)))
    UTF8_TEST_SEQUENCES.append(vs)

    # 3.5  Impossible bytes
    vs = ["Impossible bytes", []]
    vs[1].append((False, b'\xfe'))
    vs[1].append((False, b'\xff'))
    vs[1].append((False, b'\xfe\xfe\xff\xff'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 4.1  Examples of an overlong ASCII character
    vs = ["Examples of an overlong ASCII character", []]
    vs[1].append((False, b'\xc0\xaf'))
    vs[1].append((False, b'\xe0\x80\xaf'))
    vs[1].append((False, b'\xf0\x80\x80\xaf'))
    vs[1].append((False, b'\xf8\x80\x80\x80\xaf'))
    vs[1].append((False, b'\xfc\x80\x80\x80\x80\xaf'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 4.2  Maximum overlong sequences
    vs = ["Maximum overlong sequences", []]
    vs[1].append((False, b'\xc1\xbf'))
    vs[1].append((False, b'\xe0\x9f\xbf'))
    vs[1].append((False, b'\xf0\x8f\xbf\xbf'))
    vs[1].append((False, b'\xf8\x87\xbf\xbf\xbf'))
    vs[1].append((False, b'\xfc\x83\xbf\xbf\xbf\xbf'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 4.3  Overlong representation of the NUL character
    vs = ["Overlong representation of the NUL character", []]
    vs[1].append((False, b'\xc0\x80'))
    vs[1].append((False, b'\xe0\x80\x80'))
    vs[1].append((False, b'\xf0\x80\x80\x80'))
    vs[1].append((False, b'\xf8\x80\x80\x80\x80'))
    vs[1].append((False, b'\xfc\x80\x80\x80\x80\x80'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 5.1 Single UTF-16 surrogates
    vs = ["Single UTF-16 surrogates", []]
    vs[1].append((False, b'\xed\xa0\x80'))
    vs[1].append((False, b'\xed\xad\xbf'))
    vs[1].append((False, b'\xed\xae\x80'))
    vs[1].append((False, b'\xed\xaf\xbf'))
    vs[1].append((False, b'\xed\xb0\x80'))
    vs[1].append((False, b'\xed\xbe\x80'))
    vs[1].append((False, b'\xed\xbf\xbf'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 5.2 Paired UTF-16 surrogates
    vs = ["Paired UTF-16 surrogates", []]
    vs[1].append((False, b'\xed\xa0\x80\xed\xb0\x80'))
    vs[1].append((False, b'\xed\xa0\x80\xed\xbf\xbf'))
    vs[1].append((False, b'\xed\xad\xbf\xed\xb0\x80'))
    vs[1].append((False, b'\xed\xad\xbf\xed\xbf\xbf'))
    vs[1].append((False, b'\xed\xae\x80\xed\xb0\x80'))
    vs[1].append((False, b'\xed\xae\x80\xed\xbf\xbf'))
    vs[1].append((False, b'\xed\xaf\xbf\xed\xb0\x80'))
    vs[1].append((False, b'\xed\xaf\xbf\xed\xbf\xbf'))
    UTF8_TEST_SEQUENCES.append(vs)

    # 5.3 Other illegal code positions
    # Those are non-character code points and valid UTF-8 by RFC 3629
    vs = ["Non-character code points (valid UTF-8)", []]
    # https://bug686312.bugzilla.mozilla.org/attachment.cgi?id=561257
    # non-characters: EF BF [BE-BF]
    vs[1].append((True, b'\xef\xbf\xbe'))
    vs[1].append((True, b'\xef\xbf\xbf'))
    # non-characters: F[0-7] [89AB]F BF [BE-BF]
    for z1 in [b'\xf0', b'\xf1', b'\xf2', b'\xf3', b'\xf4']:
        for z2 in [b'\x8f', b'\x9f', b'\xaf', b'\xbf']:
            if not (z1 == b'\xf4' and z2 != b'\x8f'): # those encode codepoints >U+10FFFF
                for z3 in [b'\xbe', b'\xbf']:
                    zz = z1 + z2 + b'\xbf' + z3
                    if zz not in [b'\xf0\x8f\xbf\xbe', b'\xf0\x8f\xbf\xbf']: # filter overlong sequences
                        vs[1].append((True, zz))
    UTF8_TEST_SEQUENCES.append(vs)

    # Unicode "specials", such as replacement char etc
    # http://en.wikipedia.org/wiki/Specials_%28Unicode_block%29
    vs = ["Unicode specials (i.e. replacement char)", []]
    vs[1].append((True, b'\xef\xbf\xb9'))
    vs[1].append((True, b'\xef\xbf\xba'))
    vs[1].append((True, b'\xef\xbf\xbb'))
    vs[1].append((True, b'\xef\xbf\xbc'))
    vs[1].append((True, b'\xef\xbf\xbd')) # replacement char
    vs[1].append((True, b'\xef\xbf\xbe'))
    vs[1].append((True, b'\xef\xbf\xbf'))
    UTF8_TEST_SEQUENCES.append(vs)

    return UTF8_TEST_SEQUENCES


def createValidUtf8TestSequences():
    """
    Generate some exotic, but valid UTF8 test strings.
    """
    VALID_UTF8_TEST_SEQUENCES = []
    for test in createUtf8TestSequences():
        valids = [x[1] for x in test[1] if x[0]]
        if len(valids) > 0:
            VALID_UTF8_TEST_SEQUENCES.append([test[0], valids])
    return VALID_UTF8_TEST_SEQUENCES


Case6_X_X = []
Case6_X_X_CaseSubCategories = {}


def __init__(self, protocol):
    Case.__init__(self, protocol)

def onOpen(self):

    if self.isValid:
        self.expected[Case.OK] = [("message", self.PAYLOAD, False)]
        self.expectedClose = {"closedByMe": True,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_NORMAL],
                            "requireClean": True}
    else:
        self.expected[Case.OK] = []
        self.expectedClose = {"closedByMe": False,
                            "closeCode": [self.p.CLOSE_STATUS_CODE_INVALID_PAYLOAD],
                            "requireClean": False,
                            "closedByWrongEndpointIsFatal": True}

    self.p.sendMessage(self.PAYLOAD, False)
    self.p.killAfter(0.5)


i = 5
for t in createUtf8TestSequences():
    j = 1
    Case6_X_X_CaseSubCategories["6.%d" % i] = t[0]
    for p in t[1]:
        if p[0]:
            desc = "Send a text message with payload which is valid UTF-8 in one fragment."
            exp = "The message is echo'ed back to us."
        else:
            desc = "Send a text message with payload which is not valid UTF-8 in one fragment."
            exp = "The connection is failed immediately, since the payload is not valid UTF-8."
        C = type("Case6_%d_%d" % (i, j),
                (Case,),
                {"PAYLOAD": p[1],
                 "isValid": p[0],
                 "DESCRIPTION": """%s<br><br>Payload: 0x%s""" % (desc, b2a_hex(p[1])),
                 "EXPECTATION": """%s""" % exp,
                 "__init__": __init__,
                 "onOpen": onOpen})
        Case6_X_X.append(C)
        j += 1
    i += 1


# The rest of case6_x_x.py (test_utf8, test_utf8_incremental, encode,
# test_encode, __main__) tests autobahn's UTF-8 validator and an ad hoc
# encoder, not a peer: not ported.
