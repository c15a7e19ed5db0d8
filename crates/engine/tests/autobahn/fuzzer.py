"""The fuzzing client's side of a connection, as Autobahn|Testsuite runs it.

A Python 3 port of what `wstest -m fuzzingclient` runs each case on: the
client half of autobahn 0.10.9's `WebSocketProtocol`
(autobahn/websocket/protocol.py: framing, masking, chopped and "sync"
writes, the closing handshake and its timeouts, the flags the verdict reads:
closedByMe, failedByMe, droppedByMe, wasClean) with the options the
testsuite sets (failByDrop = False, closeHandshakeTimeout = 1 s,
serverConnectionDropTimeout = 1 s, openHandshakeTimeout = 5 s, incoming
UTF-8 validated, no extensions), and autobahntestsuite 25.10.1's
`FuzzingProtocol` (fuzzing.py: killAfter, closeAfter, continueLater, the
wire log). Twisted's reactor is replaced by one select() loop over one
socket; each method keeps the name and the behaviour of the original, so
that the ported cases (cases/*.py) call it as they called autobahn.

Only what the fuzzing client needs is here: no Hixie-76, no
permessage-deflate (the 12.x/13.x cases are not ported), no proxy.
"""

import base64
import codecs
import collections
import hashlib
import heapq
import os
import random
import select
import socket
import struct
import time
import zlib
from urllib.parse import urlsplit

STATE_CLOSED = 0
STATE_CONNECTING = 1
STATE_CLOSING = 2
STATE_OPEN = 3

MESSAGE_TYPE_TEXT = 1
MESSAGE_TYPE_BINARY = 2

SEND_STATE_GROUND = 0
SEND_STATE_MESSAGE_BEGIN = 1
SEND_STATE_INSIDE_MESSAGE = 2
SEND_STATE_INSIDE_MESSAGE_FRAME = 3

CLOSE_STATUS_CODE_NORMAL = 1000
CLOSE_STATUS_CODE_GOING_AWAY = 1001
CLOSE_STATUS_CODE_PROTOCOL_ERROR = 1002
CLOSE_STATUS_CODE_UNSUPPORTED_DATA = 1003
CLOSE_STATUS_CODE_RESERVED1 = 1004
CLOSE_STATUS_CODE_NULL = 1005
CLOSE_STATUS_CODE_ABNORMAL_CLOSE = 1006
CLOSE_STATUS_CODE_INVALID_PAYLOAD = 1007
CLOSE_STATUS_CODE_POLICY_VIOLATION = 1008
CLOSE_STATUS_CODE_MESSAGE_TOO_BIG = 1009
CLOSE_STATUS_CODE_MANDATORY_EXTENSION = 1010
CLOSE_STATUS_CODE_INTERNAL_ERROR = 1011
CLOSE_STATUS_CODE_TLS_HANDSHAKE_FAILED = 1015

CLOSE_STATUS_CODES_ALLOWED = [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011]

WS_MAGIC = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# What the testsuite's fuzzing client announces (its User-Agent).
USER_AGENT = "AutobahnTestSuite/25.10.1-0.10.9 (Peregrine's Python 3 port)"

# One recv() takes at most this much: the 9.x cases echo up to 16 MiB.
RECV_BYTES_MAX = 1 << 20

# Wire log rows kept per case (the 9.x cases switch the log off; a broken
# peer could otherwise make a case log without bound).
WIRELOG_ROWS_MAX = 2000


def mask_payload(mask, payload):
    """XORs `payload` with the 4-byte `mask` repeated (RFC 6455 5.3), on
    Python integers: 16 MiB take about 50 ms, a byte loop 5 s."""
    n = len(payload)
    if n == 0:
        return b""
    key = (mask * (n // 4 + 1))[:n]
    x = int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")
    return x.to_bytes(n, "little")


class XorMasker:
    """autobahn's XorMaskerSimple: masks a frame's payload piece by piece,
    remembering where in the frame it is (`pointer`)."""

    def __init__(self, mask):
        self.mask = mask
        self.ptr = 0

    def pointer(self):
        return self.ptr

    def process(self, data):
        shift = self.ptr % 4
        key = self.mask[shift:] + self.mask[:shift]
        self.ptr += len(data)
        return mask_payload(key, data)


class XorMaskerNull:
    def __init__(self):
        self.ptr = 0

    def pointer(self):
        return self.ptr

    def process(self, data):
        self.ptr += len(data)
        return bytes(data)


# permessage-deflate, as autobahn 0.10.9's `autobahn/websocket/compress_deflate.py`
# has it (the client's side only): the offer, the server's response, and the
# compressor and decompressor of one connection.

class PerMessageDeflateOffer:
    EXTENSION_NAME = "permessage-deflate"

    def __init__(self, acceptNoContextTakeover=True, acceptMaxWindowBits=True,
                 requestNoContextTakeover=False, requestMaxWindowBits=0):
        self.acceptNoContextTakeover = acceptNoContextTakeover
        self.acceptMaxWindowBits = acceptMaxWindowBits
        self.requestNoContextTakeover = requestNoContextTakeover
        self.requestMaxWindowBits = requestMaxWindowBits

    def getExtensionString(self):
        pmce_string = self.EXTENSION_NAME
        if self.acceptNoContextTakeover:
            pmce_string += "; client_no_context_takeover"
        if self.acceptMaxWindowBits:
            pmce_string += "; client_max_window_bits"
        if self.requestNoContextTakeover:
            pmce_string += "; server_no_context_takeover"
        if self.requestMaxWindowBits != 0:
            pmce_string += "; server_max_window_bits=%d" % self.requestMaxWindowBits
        return pmce_string


class PerMessageDeflateResponse:
    """PerMessageDeflateResponse.parse: the server's parameters, checked."""

    def __init__(self, client_max_window_bits, client_no_context_takeover,
                 server_max_window_bits, server_no_context_takeover):
        self.client_max_window_bits = client_max_window_bits
        self.client_no_context_takeover = client_no_context_takeover
        self.server_max_window_bits = server_max_window_bits
        self.server_no_context_takeover = server_no_context_takeover

    @classmethod
    def parse(cls, params):
        client_max_window_bits = 0
        client_no_context_takeover = False
        server_max_window_bits = 0
        server_no_context_takeover = False
        for p in params:
            if len(params[p]) > 1:
                raise Exception("multiple occurrence of extension parameter '%s' for extension '%s'"
                                % (p, cls.__name__))
            val = params[p][0]
            if p == "client_max_window_bits":
                val = int(val)
                if val not in range(8, 16):
                    raise Exception("illegal extension parameter value '%s' for parameter '%s'" % (val, p))
                client_max_window_bits = val
            elif p == "client_no_context_takeover":
                if val is not True:
                    raise Exception("illegal extension parameter value '%s' for parameter '%s'" % (val, p))
                client_no_context_takeover = True
            elif p == "server_max_window_bits":
                val = int(val)
                if val not in range(8, 16):
                    raise Exception("illegal extension parameter value '%s' for parameter '%s'" % (val, p))
                server_max_window_bits = val
            elif p == "server_no_context_takeover":
                if val is not True:
                    raise Exception("illegal extension parameter value '%s' for parameter '%s'" % (val, p))
                server_no_context_takeover = True
            else:
                raise Exception("illegal extension parameter '%s' for extension '%s'" % (p, cls.__name__))
        return cls(client_max_window_bits, client_no_context_takeover,
                   server_max_window_bits, server_no_context_takeover)


class PerMessageDeflateResponseAccept:
    def __init__(self, response, noContextTakeover=None, windowBits=None, memLevel=None):
        self.response = response
        self.noContextTakeover = noContextTakeover
        self.windowBits = windowBits
        self.memLevel = memLevel


class PerMessageDeflate:
    """The client's compressor and decompressor (isServer False)."""

    DEFAULT_WINDOW_BITS = zlib.MAX_WBITS
    DEFAULT_MEM_LEVEL = 8

    @classmethod
    def createFromResponseAccept(cls, accept):
        return cls(accept.response.server_no_context_takeover,
                   accept.noContextTakeover if accept.noContextTakeover is not None
                   else accept.response.client_no_context_takeover,
                   accept.response.server_max_window_bits,
                   accept.windowBits if accept.windowBits is not None
                   else accept.response.client_max_window_bits,
                   accept.memLevel)

    def __init__(self, server_no_context_takeover, client_no_context_takeover,
                 server_max_window_bits, client_max_window_bits, mem_level):
        self.server_no_context_takeover = server_no_context_takeover
        self.client_no_context_takeover = client_no_context_takeover
        self.server_max_window_bits = server_max_window_bits if server_max_window_bits != 0 \
            else self.DEFAULT_WINDOW_BITS
        self.client_max_window_bits = client_max_window_bits if client_max_window_bits != 0 \
            else self.DEFAULT_WINDOW_BITS
        self.mem_level = mem_level if mem_level else self.DEFAULT_MEM_LEVEL
        self._compressor = None
        self._decompressor = None

    def startCompressMessage(self):
        if self._compressor is None or self.client_no_context_takeover:
            self._compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED,
                                                -self.client_max_window_bits, self.mem_level)

    def compressMessageData(self, data):
        return self._compressor.compress(data)

    def endCompressMessage(self):
        data = self._compressor.flush(zlib.Z_SYNC_FLUSH)
        return data[:-4]

    def startDecompressMessage(self):
        if self._decompressor is None or self.server_no_context_takeover:
            self._decompressor = zlib.decompressobj(-self.server_max_window_bits)

    def decompressMessageData(self, data):
        return self._decompressor.decompress(data)

    def endDecompressMessage(self):
        self._decompressor.decompress(b"\x00\x00\xff\xff")


def parse_extensions(value):
    """autobahn's parseWebSocketExtensions: [(name, {param: [values]})]."""
    exts = []
    for e in value.split(","):
        ext = e.split(";")
        if len(ext) > 0:
            extension = ext[0].strip()
            params = {}
            for p in ext[1:]:
                p = p.strip()
                if not p:
                    continue
                if "=" in p:
                    key, value = (x.strip() for x in p.split("=", 1))
                    if value.startswith('"') and value.endswith('"'):
                        value = value[1:-1]
                else:
                    key, value = p, True
                params.setdefault(key, []).append(value)
            exts.append((extension, params))
    return exts


class TrafficStats:
    """What autobahn counts of a connection's traffic (the compression
    ratio its report shows for 12.x and 13.x)."""

    def __init__(self):
        self.outgoingOctetsAppLevel = 0
        self.outgoingOctetsWebSocketLevel = 0
        self.incomingOctetsAppLevel = 0
        self.incomingOctetsWebSocketLevel = 0


class FrameHeader:
    def __init__(self, opcode, fin, rsv, length, mask):
        self.opcode = opcode
        self.fin = fin
        self.rsv = rsv
        self.length = length
        self.mask = mask


class Timer:
    """A reactor.callLater() handle."""

    def __init__(self, when, seq, fun, args):
        self.when = when
        self.seq = seq
        self.fun = fun
        self.args = args
        self.cancelled = False

    def cancel(self):
        self.cancelled = True

    def __lt__(self, other):
        return (self.when, self.seq) < (other.when, other.seq)


class Factory:
    """What the cases read from `self.p.factory`."""

    isServer = False


def ascii_log(data, maxlen=64):
    """fuzzing.py's asciiLogData: the start of a payload, as text if it is
    UTF-8, else as hex."""
    data = bytes(data)
    tail = " ..." if len(data) > maxlen - 4 else ""
    head = data[:maxlen] if tail else data
    try:
        return head.decode("utf8") + tail
    except UnicodeDecodeError:
        return "0x" + head.hex() + tail


class FuzzingClient:
    """One connection, running one case (autobahn's WebSocketClientProtocol
    with autobahntestsuite's FuzzingProtocol mixed in)."""

    CLOSE_STATUS_CODE_NORMAL = CLOSE_STATUS_CODE_NORMAL
    CLOSE_STATUS_CODE_GOING_AWAY = CLOSE_STATUS_CODE_GOING_AWAY
    CLOSE_STATUS_CODE_PROTOCOL_ERROR = CLOSE_STATUS_CODE_PROTOCOL_ERROR
    CLOSE_STATUS_CODE_UNSUPPORTED_DATA = CLOSE_STATUS_CODE_UNSUPPORTED_DATA
    CLOSE_STATUS_CODE_RESERVED1 = CLOSE_STATUS_CODE_RESERVED1
    CLOSE_STATUS_CODE_NULL = CLOSE_STATUS_CODE_NULL
    CLOSE_STATUS_CODE_ABNORMAL_CLOSE = CLOSE_STATUS_CODE_ABNORMAL_CLOSE
    CLOSE_STATUS_CODE_INVALID_PAYLOAD = CLOSE_STATUS_CODE_INVALID_PAYLOAD
    CLOSE_STATUS_CODE_POLICY_VIOLATION = CLOSE_STATUS_CODE_POLICY_VIOLATION
    CLOSE_STATUS_CODE_MESSAGE_TOO_BIG = CLOSE_STATUS_CODE_MESSAGE_TOO_BIG
    CLOSE_STATUS_CODE_MANDATORY_EXTENSION = CLOSE_STATUS_CODE_MANDATORY_EXTENSION
    CLOSE_STATUS_CODE_INTERNAL_ERROR = CLOSE_STATUS_CODE_INTERNAL_ERROR

    STATE_CLOSED = STATE_CLOSED
    STATE_CONNECTING = STATE_CONNECTING
    STATE_CLOSING = STATE_CLOSING
    STATE_OPEN = STATE_OPEN

    # autobahn's client defaults, and what the fuzzing factory sets.
    failByDrop = False
    utf8validateIncoming = True
    acceptMaskedServerFrames = False
    maskClientFrames = True
    applyMask = True
    echoCloseCodeReason = False
    serverConnectionDropTimeout = 1
    openHandshakeTimeout = 5
    closeHandshakeTimeout = 1

    def __init__(self, url, case_class, case_timeout):
        parts = urlsplit(url)
        if parts.scheme != "ws":
            raise ValueError("only ws:// URLs are supported: %r" % url)
        self.host = parts.hostname
        self.port = parts.port or 80
        self.resource = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        self.case_timeout = case_timeout
        self.factory = Factory()
        self.Case = case_class

        # _connectionMade
        self.state = STATE_CONNECTING
        self.send_state = SEND_STATE_GROUND
        self.data = bytearray()
        self.send_queue = collections.deque()
        self.closedByMe = False
        self.failedByMe = False
        self.droppedByMe = False
        self.wasClean = False
        self.wasNotCleanReason = None
        self.wasServerConnectionDropTimeout = False
        self.wasOpenHandshakeTimeout = False
        self.wasCloseHandshakeTimeout = False
        self.localCloseCode = None
        self.localCloseReason = None
        self.remoteCloseCode = None
        self.remoteCloseReason = None
        self.serverConnectionDropTimeoutCall = None
        self.openHandshakeTimeoutCall = None
        self.closeHandshakeTimeoutCall = None
        self.autoFragmentSize = 0
        self.inside_message = False
        self.current_frame = None
        self.http_response_data = None
        self.agent = None
        # permessage-deflate: what a case offers, how it judges the answer,
        # and what was agreed.
        self.perMessageCompressionOffers = []
        self.perMessageCompressionAccept = lambda response: None
        self._perMessageCompress = None
        self._isMessageCompressed = False
        self.trafficStats = TrafficStats()

        # FuzzingProtocol.connectionMade
        self.connectionWasOpen = None
        self.caseStart = 0
        self.caseEnd = 0
        self.createWirelog = True
        self.wirelog = []
        self.createStats = True
        self.rxOctetStats = {}
        self.rxFrameStats = {}
        self.txOctetStats = {}
        self.txFrameStats = {}

        # The stand-in for Twisted: one socket, its output, timers.
        self.sock = None
        self.outbuf = collections.deque()
        self.lose_after_flush = False
        self.timers = []
        self.timer_seq = 0
        self.lost = False
        self.lost_reason = None

        self.runCase = case_class(self)

    # ---------------------------------------------------------------- reactor

    def call_later(self, delay, fun, *args):
        self.timer_seq += 1
        t = Timer(time.monotonic() + delay, self.timer_seq, fun, args)
        heapq.heappush(self.timers, t)
        return t

    def run(self):
        """Connects, runs the case to the end of the connection, and returns
        the case (its verdict filled in)."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=5)
        except OSError as e:
            self.runCase.result = "Could not connect to %s:%d: %s" % (self.host, self.port, e)
            self.runCase.resultClose = "The TCP connection was never made"
            self.runCase.behaviorClose = self.runCase.FAILED
            return self.runCase
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self.sock = sock
        self.rbuf = bytearray(RECV_BYTES_MAX)
        self.startHandshake()
        if self.openHandshakeTimeout > 0:
            self.openHandshakeTimeoutCall = self.call_later(
                self.openHandshakeTimeout, self.onOpenHandshakeTimeout
            )
        # Not in Autobahn, which can wait forever for a peer that neither
        # answers nor closes: the whole case is bounded.
        self.call_later(self.case_timeout, self.onCaseTimeout)
        self.loop()
        return self.runCase

    def loop(self):
        while not self.lost:
            now = time.monotonic()
            while self.timers and self.timers[0].when <= now and not self.lost:
                t = heapq.heappop(self.timers)
                if not t.cancelled:
                    t.fun(*t.args)
            if self.lost:
                break
            # Queued (chopped or "sync") writes go out one per turn of the
            # loop, each once the one before has left for the kernel, as
            # autobahn re-enters the reactor between them; once the
            # connection is closed, what is still queued is not sent.
            if self.send_queue and not self.outbuf:
                chunk, sync = self.send_queue.popleft()
                if self.state != STATE_CLOSED:
                    self.outbuf.append(memoryview(chunk))
                    self.logTxOctets(chunk, sync)
            if self.outbuf:
                self.try_write()
                if self.lost:
                    break
            if self.lose_after_flush and not self.outbuf and not self.send_queue:
                self.connectionLost("dropped by me")
                break
            if self.send_queue and not self.outbuf:
                timeout = 0
            elif self.timers:
                timeout = max(0.0, self.timers[0].when - time.monotonic())
            else:
                timeout = None
            want_read = [] if self.lose_after_flush else [self.sock]
            want_write = [self.sock] if self.outbuf else []
            r, w, _ = select.select(want_read, want_write, [], timeout)
            if r:
                self.read()
            if w and not self.lost:
                self.try_write()

    def try_write(self):
        """Writes what the kernel takes; returns whether all went out."""
        while self.outbuf:
            view = self.outbuf[0]
            try:
                n = self.sock.send(view)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as e:
                # The peer is gone; whatever it sent before is still to be
                # read (a close frame, say) before the connection counts as
                # lost.
                self.outbuf.clear()
                self.send_queue.clear()
                self.drain_and_lose("write failed: %s" % e)
                return False
            if n < len(view):
                self.outbuf[0] = view[n:]
                return False
            self.outbuf.popleft()
        return True

    def read(self):
        try:
            n = self.sock.recv_into(self.rbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.connectionLost("read failed: %s" % e)
            return
        if n == 0:
            self.connectionLost("closed by peer")
            return
        self.dataReceived(self.rbuf[:n])

    def drain_and_lose(self, reason):
        self.sock.setblocking(True)
        self.sock.settimeout(0.2)
        while not self.lost:
            try:
                d = self.sock.recv(RECV_BYTES_MAX)
            except OSError:
                break
            if not d:
                break
            self.dataReceived(d)
        if not self.lost:
            self.connectionLost(reason)

    def closeTransport(self, abort):
        """Twisted's abortConnection() (abort) or loseConnection() (after
        the output is written)."""
        if abort:
            self.outbuf.clear()
            self.send_queue.clear()
            self.connectionLost("dropped by me")
        else:
            self.lose_after_flush = True

    def connectionLost(self, reason):
        if self.lost:
            return
        self.lost = True
        self.lost_reason = reason
        try:
            self.sock.close()
        except OSError:
            pass
        # WebSocketProtocol._connectionLost
        if self.serverConnectionDropTimeoutCall is not None:
            self.serverConnectionDropTimeoutCall.cancel()
            self.serverConnectionDropTimeoutCall = None
        if self.state != STATE_CLOSED:
            self.state = STATE_CLOSED
        if not self.wasClean:
            if not self.droppedByMe and self.wasNotCleanReason is None:
                self.wasNotCleanReason = (
                    "peer dropped the TCP connection without previous WebSocket closing handshake"
                )
            self.onClose(self.wasClean, CLOSE_STATUS_CODE_ABNORMAL_CLOSE,
                         "connection was closed uncleanly (%s)" % self.wasNotCleanReason)
        else:
            self.onClose(self.wasClean, self.remoteCloseCode, self.remoteCloseReason)
        # FuzzingProtocol.connectionLost
        self.runCase.onConnectionLost(self.failedByMe)
        self.caseEnd = time.time()

    # ------------------------------------------------- FuzzingProtocol (timers)

    def continueLater(self, delay, fun, tag=None):
        self.wirelog.append(("CT", delay, tag))
        self.call_later(delay, self.executeContinueLater, fun, tag)

    def executeContinueLater(self, fun, tag):
        if self.state != STATE_CLOSED:
            self.wirelog.append(("CTE", tag))
            fun()

    def killAfter(self, delay):
        self.wirelog.append(("KL", delay))
        self.call_later(delay, self.executeKillAfter)

    def executeKillAfter(self):
        if self.state != STATE_CLOSED:
            self.wirelog.append(("KLE",))
            self.failConnection()

    def closeAfter(self, delay):
        self.wirelog.append(("TI", delay))
        self.call_later(delay, self.executeCloseAfter)

    def executeCloseAfter(self):
        if self.state != STATE_CLOSED:
            self.wirelog.append(("TIE",))
            self.sendClose()

    def onCaseTimeout(self):
        if not self.lost:
            self.wirelog.append(("DRIVER", "case timeout after %s s" % self.case_timeout))
            if self.wasNotCleanReason is None:
                self.wasNotCleanReason = "the case ran past the driver's %s s limit" % self.case_timeout
            self.wasClean = False
            if self.state != STATE_CLOSED:
                self.droppedByMe = True
                self.state = STATE_CLOSED
            self.closeTransport(abort=True)

    def enableWirelog(self, enable):
        if enable != self.createWirelog:
            self.createWirelog = enable
            self.wirelog.append(("WLM", enable))

    # ------------------------------------------------- FuzzingProtocol (events)

    def onOpen(self):
        self.connectionWasOpen = True
        self.caseStart = time.time()
        self.runCase.onOpen()

    def onMessage(self, payload, isBinary):
        self.runCase.onMessage(payload, isBinary)

    def onPong(self, payload):
        self.runCase.onPong(payload)

    def onPing(self, payload):
        # autobahn's default, which the fuzzing protocol keeps: answer.
        if self.state == STATE_OPEN:
            self.sendPong(payload)

    def onClose(self, wasClean, code, reason):
        self.runCase.onClose(wasClean, code, reason)

    # ---------------------------------------------------------- wire log

    def log(self, row):
        if self.createWirelog and len(self.wirelog) < WIRELOG_ROWS_MAX:
            self.wirelog.append(row)

    def logRxOctets(self, data):
        l = len(data)
        self.rxOctetStats[l] = self.rxOctetStats.get(l, 0) + 1
        self.log(("RO", (l, bytes(data[:64]).hex())))

    def logTxOctets(self, data, sync):
        l = len(data)
        self.txOctetStats[l] = self.txOctetStats.get(l, 0) + 1
        self.log(("TO", (l, bytes(data[:64]).hex()), sync))

    def logRxFrame(self, frameHeader, payload):
        self.rxFrameStats[frameHeader.opcode] = self.rxFrameStats.get(frameHeader.opcode, 0) + 1
        if self.createWirelog:
            p = b"".join(payload)
            self.log(("RF", (len(p), ascii_log(p)), frameHeader.opcode, frameHeader.fin,
                      frameHeader.rsv, frameHeader.mask is not None))

    def logTxFrame(self, frameHeader, payload, repeatLength, chopsize, sync):
        self.txFrameStats[frameHeader.opcode] = self.txFrameStats.get(frameHeader.opcode, 0) + 1
        if self.createWirelog:
            self.log(("TF", (len(payload), ascii_log(payload)), frameHeader.opcode,
                      frameHeader.fin, frameHeader.rsv,
                      frameHeader.mask.hex() if frameHeader.mask else None,
                      repeatLength, chopsize, sync))

    # ------------------------------------------------------------ handshake

    def startHandshake(self):
        self.websocket_key = base64.b64encode(os.urandom(16))
        request = "GET %s HTTP/1.1\r\n" % self.resource
        request += "User-Agent: %s\r\n" % USER_AGENT
        host = "[%s]" % self.host if ":" in self.host else self.host
        request += "Host: %s:%d\r\n" % (host, self.port)
        request += "Upgrade: WebSocket\r\n"
        request += "Connection: Upgrade\r\n"
        request += "Pragma: no-cache\r\n"
        request += "Cache-Control: no-cache\r\n"
        request += "Sec-WebSocket-Key: %s\r\n" % self.websocket_key.decode()
        request += "Sec-WebSocket-Version: 13\r\n"
        if self.perMessageCompressionOffers:
            request += "Sec-WebSocket-Extensions: %s\r\n" % ", ".join(
                offer.getExtensionString() for offer in self.perMessageCompressionOffers)
        request += "\r\n"
        self.http_request_data = request.encode("utf8")
        self.sendData(self.http_request_data)

    def onOpenHandshakeTimeout(self):
        self.openHandshakeTimeoutCall = None
        if self.state == STATE_CONNECTING:
            self.wasClean = False
            self.wasNotCleanReason = "peer did not finish (in time) the opening handshake"
            self.wasOpenHandshakeTimeout = True
            self.dropConnection(abort=True)

    def failHandshake(self, reason):
        self.wasNotCleanReason = reason
        self.dropConnection(abort=True)

    def processHandshake(self):
        end_of_header = self.data.find(b"\r\n\r\n")
        if end_of_header < 0:
            return
        self.http_response_data = bytes(self.data[:end_of_header + 4])
        raw = self.http_response_data.decode("utf8", "replace").splitlines()
        status_line = raw[0].strip()
        headers, counts = {}, {}
        for h in raw[1:]:
            i = h.find(":")
            if i > 0:
                key = h[:i].strip().lower()
                value = h[i + 1:].strip()
                if key in headers:
                    headers[key] += ", %s" % value
                    counts[key] += 1
                else:
                    headers[key] = value
                    counts[key] = 1
        self.http_headers = headers
        sl = status_line.split()
        if len(sl) < 2:
            return self.failHandshake("Bad HTTP response status line '%s'" % status_line)
        if sl[0].strip() != "HTTP/1.1":
            return self.failHandshake("Unsupported HTTP version ('%s')" % sl[0].strip())
        try:
            status_code = int(sl[1].strip())
        except ValueError:
            return self.failHandshake("Bad HTTP status code ('%s')" % sl[1].strip())
        if status_code != 101:
            reason = " - %s" % "".join(sl[2:]) if len(sl) > 2 else ""
            return self.failHandshake("WebSocket connection upgrade failed (%d%s)" % (status_code, reason))
        if "upgrade" not in headers:
            return self.failHandshake("HTTP Upgrade header missing")
        if headers["upgrade"].strip().lower() != "websocket":
            return self.failHandshake(
                "HTTP Upgrade header different from 'websocket' (case-insensitive) : %s" % headers["upgrade"])
        if "connection" not in headers:
            return self.failHandshake("HTTP Connection header missing")
        if not any(c.strip().lower() == "upgrade" for c in headers["connection"].split(",")):
            return self.failHandshake(
                "HTTP Connection header does not include 'upgrade' value (case-insensitive) : %s"
                % headers["connection"])
        if "sec-websocket-accept" not in headers:
            return self.failHandshake("HTTP Sec-WebSocket-Accept header missing in opening handshake reply")
        if counts["sec-websocket-accept"] > 1:
            return self.failHandshake(
                "HTTP Sec-WebSocket-Accept header appears more than once in opening handshake reply")
        got = headers["sec-websocket-accept"].strip()
        want = base64.b64encode(hashlib.sha1(self.websocket_key + WS_MAGIC).digest()).decode()
        if got != want:
            return self.failHandshake("HTTP Sec-WebSocket-Accept bogus value : expected %s / got %s" % (want, got))
        if "sec-websocket-extensions" in headers:
            if counts["sec-websocket-extensions"] > 1:
                return self.failHandshake(
                    "HTTP Sec-WebSocket-Extensions header appears more than once in opening handshake reply")
            for extension, params in parse_extensions(headers["sec-websocket-extensions"]):
                if extension == "":
                    continue
                offered = [o.EXTENSION_NAME for o in self.perMessageCompressionOffers]
                if extension != PerMessageDeflateOffer.EXTENSION_NAME or extension not in offered:
                    return self.failHandshake(
                        "server wants to use extension '%s' we did not request, haven't implemented "
                        "or did not enable" % extension)
                if self._perMessageCompress is not None:
                    return self.failHandshake(
                        "multiple occurrence of a permessage-compress extension")
                try:
                    response = PerMessageDeflateResponse.parse(params)
                except Exception as e:
                    return self.failHandshake(
                        "illegal permessage-compress parameters: %s" % e)
                accept = self.perMessageCompressionAccept(response)
                if accept is None:
                    return self.failHandshake(
                        "WebSocket permessage-compress extension response from server denied by client")
                self._perMessageCompress = PerMessageDeflate.createFromResponseAccept(accept)
        if "sec-websocket-protocol" in headers:
            if counts["sec-websocket-protocol"] > 1:
                return self.failHandshake(
                    "HTTP Sec-WebSocket-Protocol header appears more than once in opening handshake reply")
            sp = headers["sec-websocket-protocol"].strip()
            if sp != "":
                return self.failHandshake(
                    "subprotocol selected by server (%s) not in subprotocol list requested by client ([])" % sp)

        del self.data[:end_of_header + 4]
        self.state = STATE_OPEN
        if self.openHandshakeTimeoutCall is not None:
            self.openHandshakeTimeoutCall.cancel()
            self.openHandshakeTimeoutCall = None
        self.inside_message = False
        self.current_frame = None
        self.agent = headers.get("server", "UnknownServer")
        self.onOpen()
        if len(self.data) > 0:
            self.consumeData()

    # ------------------------------------------------------ incoming data

    def dataReceived(self, data):
        self.logRxOctets(data)
        self.data += data
        self.consumeData()

    def consumeData(self):
        if self.state == STATE_OPEN or self.state == STATE_CLOSING:
            while self.processData() and self.state != STATE_CLOSED:
                pass
        elif self.state == STATE_CONNECTING:
            self.processHandshake()
        # STATE_CLOSED: data after the connection was failed is ignored.

    def processData(self):
        """processDataHybi: returns whether to call again (more buffered)."""
        buffered_len = len(self.data)
        if self.current_frame is None:
            if buffered_len < 2:
                return False
            b = self.data[0]
            frame_fin = (b & 0x80) != 0
            frame_rsv = (b & 0x70) >> 4
            frame_opcode = b & 0x0F
            b = self.data[1]
            frame_masked = (b & 0x80) != 0
            frame_payload_len1 = b & 0x7F

            if frame_rsv != 0:
                if self._perMessageCompress is not None and frame_rsv == 4:
                    pass
                elif self.protocolViolation("RSV = %d and no extension negotiated" % frame_rsv):
                    return False
            if not self.acceptMaskedServerFrames and frame_masked:
                if self.protocolViolation("masked server-to-client frame"):
                    return False
            if frame_opcode > 7:
                if not frame_fin:
                    if self.protocolViolation("fragmented control frame"):
                        return False
                if frame_payload_len1 > 125:
                    if self.protocolViolation("control frame with payload length > 125 octets"):
                        return False
                if frame_opcode not in (8, 9, 10):
                    if self.protocolViolation("control frame using reserved opcode %d" % frame_opcode):
                        return False
                if frame_opcode == 8 and frame_payload_len1 == 1:
                    if self.protocolViolation("received close control frame with payload len 1"):
                        return False
            else:
                if frame_opcode not in (0, 1, 2):
                    if self.protocolViolation("data frame using reserved opcode %d" % frame_opcode):
                        return False
                if not self.inside_message and frame_opcode == 0:
                    if self.protocolViolation("received continuation data frame outside fragmented message"):
                        return False
                if self.inside_message and frame_opcode != 0:
                    if self.protocolViolation(
                            "received non-continuation data frame while inside fragmented message"):
                        return False
                if self._perMessageCompress is not None and frame_rsv == 4 and self.inside_message:
                    if self.protocolViolation("received continuation data frame with non-zero RSV"):
                        return False

            mask_len = 4 if frame_masked else 0
            if frame_payload_len1 < 126:
                frame_header_len = 2 + mask_len
            elif frame_payload_len1 == 126:
                frame_header_len = 2 + 2 + mask_len
            else:
                frame_header_len = 2 + 8 + mask_len
            if buffered_len < frame_header_len:
                return False
            i = 2
            if frame_payload_len1 == 126:
                frame_payload_len = struct.unpack("!H", self.data[i:i + 2])[0]
                if frame_payload_len < 126:
                    if self.protocolViolation("invalid data frame length (not using minimal length encoding)"):
                        return False
                i += 2
            elif frame_payload_len1 == 127:
                frame_payload_len = struct.unpack("!Q", self.data[i:i + 8])[0]
                if frame_payload_len > 0x7FFFFFFFFFFFFFFF:
                    if self.protocolViolation("invalid data frame length (>2^63)"):
                        return False
                if frame_payload_len < 65536:
                    if self.protocolViolation("invalid data frame length (not using minimal length encoding)"):
                        return False
                i += 8
            else:
                frame_payload_len = frame_payload_len1
            frame_mask = None
            if frame_masked:
                frame_mask = bytes(self.data[i:i + 4])
                i += 4
            if frame_masked and frame_payload_len > 0 and self.applyMask:
                self.current_frame_masker = XorMasker(frame_mask)
            else:
                self.current_frame_masker = XorMaskerNull()
            del self.data[:i]
            self.current_frame = FrameHeader(frame_opcode, frame_fin, frame_rsv, frame_payload_len, frame_mask)
            self.onFrameBegin()
            return frame_payload_len == 0 or len(self.data) > 0

        rest = self.current_frame.length - self.current_frame_masker.pointer()
        if buffered_len >= rest:
            data = bytes(self.data[:rest])
            del self.data[:rest]
        else:
            data = bytes(self.data)
            self.data.clear()
        payload = self.current_frame_masker.process(data) if data else b""
        if self.onFrameData(payload) is False:
            return False
        if self.current_frame_masker.pointer() == self.current_frame.length:
            if self.onFrameEnd() is False:
                return False
        return len(self.data) > 0

    def onFrameBegin(self):
        if self.current_frame.opcode > 7:
            self.control_frame_data = []
        else:
            if not self.inside_message:
                self.inside_message = True
                if self._perMessageCompress is not None and self.current_frame.rsv == 4:
                    self._isMessageCompressed = True
                    self._perMessageCompress.startDecompressMessage()
                else:
                    self._isMessageCompressed = False
                if self.current_frame.opcode == MESSAGE_TYPE_TEXT and self.utf8validateIncoming:
                    self.utf8validator = codecs.getincrementaldecoder("utf-8")("strict")
                    self.utf8validateIncomingCurrentMessage = True
                else:
                    self.utf8validateIncomingCurrentMessage = False
                self.onMessageBegin(self.current_frame.opcode == MESSAGE_TYPE_BINARY)
            self.onMessageFrameBegin(self.current_frame.length)

    def onFrameData(self, payload):
        if self.current_frame.opcode > 7:
            self.control_frame_data.append(payload)
        else:
            if self._isMessageCompressed:
                self.trafficStats.incomingOctetsWebSocketLevel += len(payload)
                payload = self._perMessageCompress.decompressMessageData(payload)
                self.trafficStats.incomingOctetsAppLevel += len(payload)
            if self.utf8validateIncomingCurrentMessage:
                try:
                    self.utf8validator.decode(payload, final=False)
                except UnicodeDecodeError as e:
                    if self.invalidPayload("encountered invalid UTF-8 while processing text message (%s)" % e):
                        return False
            self.onMessageFrameData(payload)

    def onFrameEnd(self):
        if self.current_frame.opcode > 7:
            self.logRxFrame(self.current_frame, self.control_frame_data)
            self.processControlFrame()
        else:
            self.logRxFrame(self.current_frame, self.frame_data or [])
            self.onMessageFrameEnd()
            if self.current_frame.fin:
                if self._isMessageCompressed:
                    self._perMessageCompress.endDecompressMessage()
                if self.utf8validateIncomingCurrentMessage:
                    try:
                        self.utf8validator.decode(b"", final=True)
                    except UnicodeDecodeError:
                        if self.invalidPayload("UTF-8 text message payload ended within Unicode code point"):
                            return False
                self.onMessageEnd()
                self.inside_message = False
        self.current_frame = None

    def processControlFrame(self):
        payload = b"".join(self.control_frame_data)
        self.control_frame_data = None
        opcode = self.current_frame.opcode
        if opcode == 8:
            code = None
            reasonRaw = None
            if len(payload) > 1:
                code = struct.unpack("!H", payload[0:2])[0]
                if len(payload) > 2:
                    reasonRaw = payload[2:]
            if self.onCloseFrame(code, reasonRaw):
                return False
        elif opcode == 9:
            self.onPing(payload)
        elif opcode == 10:
            self.onPong(payload)
        return True

    # The message API autobahn's WebSocketProtocol gives the fuzzing
    # protocol (onMessageBegin ... onMessageEnd, then onMessage).

    def onMessageBegin(self, isBinary):
        self.message_is_binary = isBinary
        self.message_data = []
        self.message_data_total_length = 0

    def onMessageFrameBegin(self, length):
        self.frame_length = length
        self.frame_data = []
        self.message_data_total_length += length

    def onMessageFrameData(self, payload):
        if not self.failedByMe:
            self.frame_data.append(payload)

    def onMessageFrameEnd(self):
        if not self.failedByMe:
            self.message_data.extend(self.frame_data)
        self.frame_data = None

    def onMessageEnd(self):
        if not self.failedByMe:
            self.onMessage(b"".join(self.message_data), self.message_is_binary)
        self.message_data = None

    # ------------------------------------------------------------ closing

    def onCloseFrame(self, code, reasonRaw):
        self.remoteCloseCode = code
        if code is not None and (code < 1000 or (1000 <= code <= 2999 and code not in CLOSE_STATUS_CODES_ALLOWED)
                                 or code >= 5000):
            if self.protocolViolation("invalid close code %d" % code):
                return True
        if reasonRaw is None:
            self.remoteCloseReason = None
        else:
            try:
                self.remoteCloseReason = reasonRaw.decode("utf8")
            except UnicodeDecodeError:
                if self.invalidPayload("invalid close reason (non-UTF-8 payload)"):
                    return True
                self.remoteCloseReason = reasonRaw.decode("utf8", "replace")

        if self.state == STATE_CLOSING:
            # The peer's answer to our close.
            if self.closeHandshakeTimeoutCall is not None:
                self.closeHandshakeTimeoutCall.cancel()
                self.closeHandshakeTimeoutCall = None
            self.wasClean = True
            # A client waits for the server to drop the TCP connection; if
            # it does not in time, the client does, and that is not clean.
            if self.serverConnectionDropTimeout > 0:
                self.serverConnectionDropTimeoutCall = self.call_later(
                    self.serverConnectionDropTimeout, self.onServerConnectionDropTimeout)
        elif self.state == STATE_OPEN:
            # The peer starts the closing handshake: answer with 1000.
            self.wasClean = True
            if self.echoCloseCodeReason:
                self.sendCloseFrame(code=code, reasonUtf8=reasonRaw, isReply=True)
            else:
                self.sendCloseFrame(code=CLOSE_STATUS_CODE_NORMAL, isReply=True)
        elif self.state == STATE_CLOSED:
            self.wasClean = False
        return False

    def onServerConnectionDropTimeout(self):
        self.serverConnectionDropTimeoutCall = None
        if self.state != STATE_CLOSED:
            self.wasClean = False
            self.wasNotCleanReason = "server did not drop TCP connection (in time)"
            self.wasServerConnectionDropTimeout = True
            self.dropConnection(abort=True)

    def onCloseHandshakeTimeout(self):
        self.closeHandshakeTimeoutCall = None
        if self.state != STATE_CLOSED:
            self.wasClean = False
            self.wasNotCleanReason = "peer did not respond (in time) in closing handshake"
            self.wasCloseHandshakeTimeout = True
            self.dropConnection(abort=True)

    def dropConnection(self, abort=False):
        if self.state != STATE_CLOSED:
            self.droppedByMe = True
            self.state = STATE_CLOSED
            self.closeTransport(abort)

    def failConnection(self, code=CLOSE_STATUS_CODE_GOING_AWAY, reason="Going Away"):
        if self.state != STATE_CLOSED:
            self.failedByMe = True
            if self.failByDrop:
                self.wasClean = False
                self.wasNotCleanReason = "I failed the WebSocket connection by dropping the TCP connection"
                self.dropConnection(abort=True)
            elif self.state != STATE_CLOSING:
                self.sendCloseFrame(code=code, reasonUtf8=reason.encode("utf8")[:125 - 2], isReply=False)
            else:
                self.dropConnection(abort=False)

    def protocolViolation(self, reason):
        self.log(("PV", reason))
        self.failConnection(CLOSE_STATUS_CODE_PROTOCOL_ERROR, reason)
        return self.failByDrop

    def invalidPayload(self, reason):
        self.log(("IP", reason))
        self.failConnection(CLOSE_STATUS_CODE_INVALID_PAYLOAD, reason)
        return self.failByDrop

    # ------------------------------------------------------------ sending

    def sendData(self, data, sync=False, chopsize=None):
        """Writes `data`, or queues it: chopped into `chopsize` pieces, or
        as one piece of its own (`sync`), each written alone."""
        if chopsize and chopsize > 0:
            for i in range(0, max(len(data), 1), chopsize):
                self.send_queue.append((data[i:i + chopsize], True))
        elif sync or len(self.send_queue) > 0:
            self.send_queue.append((data, sync))
        else:
            if self.lost or self.lose_after_flush:
                return
            self.outbuf.append(memoryview(data))
            self.logTxOctets(data, False)

    def sendFrame(self, opcode, payload=b"", fin=True, rsv=0, mask=None, payload_len=None, chopsize=None,
                  sync=False):
        """Sends one frame as given, valid or not. With `payload_len`, the
        payload is `payload` repeated to that length."""
        if payload_len is not None:
            if len(payload) < 1:
                raise Exception("cannot construct repeated payload with length %d from payload of length %d"
                                % (payload_len, len(payload)))
            l = payload_len
            pl = payload * (payload_len // len(payload)) + payload[:payload_len % len(payload)]
        else:
            l = len(payload)
            pl = payload
        b0 = 0
        if fin:
            b0 |= 1 << 7
        b0 |= (rsv % 8) << 4
        b0 |= opcode % 128
        b1 = 0
        if mask or self.maskClientFrames:
            b1 |= 1 << 7
            if not mask:
                mask = struct.pack("!I", random.getrandbits(32))
                mv = mask
            else:
                mv = b""
            plm = mask_payload(mask, pl) if l > 0 and self.applyMask else pl
        else:
            mv = b""
            plm = pl
        el = b""
        if l <= 125:
            b1 |= l
        elif l <= 0xFFFF:
            b1 |= 126
            el = struct.pack("!H", l)
        else:
            b1 |= 127
            el = struct.pack("!Q", l)
        raw = b"".join([bytes((b0, b1)), el, mv, plm])
        self.logTxFrame(FrameHeader(opcode, fin, rsv, l, mask), payload, payload_len, chopsize, sync)
        self.sendData(raw, sync, chopsize)

    def sendPing(self, payload=None):
        if self.state != STATE_OPEN:
            return
        self.sendFrame(opcode=9, payload=payload or b"")

    def sendPong(self, payload=None):
        if self.state != STATE_OPEN:
            return
        self.sendFrame(opcode=10, payload=payload or b"")

    def sendCloseFrame(self, code=None, reasonUtf8=None, isReply=False):
        """Sends a close frame as given (valid or not) and moves to
        CLOSING."""
        if self.state == STATE_CLOSING or self.state == STATE_CLOSED:
            return
        if self.state == STATE_CONNECTING:
            raise Exception("cannot close a connection not yet connected")
        payload = b""
        if code is not None:
            payload += struct.pack("!H", code)
        if reasonUtf8 is not None:
            payload += reasonUtf8
        self.sendFrame(opcode=8, payload=payload)
        self.state = STATE_CLOSING
        self.closedByMe = not isReply
        self.localCloseCode = code
        self.localCloseReason = reasonUtf8
        if self.closedByMe and self.closeHandshakeTimeout > 0:
            self.closeHandshakeTimeoutCall = self.call_later(self.closeHandshakeTimeout,
                                                             self.onCloseHandshakeTimeout)

    def sendClose(self, code=None, reason=None):
        """Starts the closing handshake with a valid code (1000 or
        3000-4999) and reason."""
        if code is not None:
            if type(code) != int:
                raise Exception("invalid type %s for close code" % type(code))
            if code != 1000 and not (3000 <= code <= 4999):
                raise Exception("invalid close code %d" % code)
        if reason is not None:
            if code is None:
                raise Exception("close reason without close code")
            reasonUtf8 = reason.encode("utf8") if isinstance(reason, str) else bytes(reason)
            if len(reasonUtf8) + 2 > 125:
                reasonUtf8 = reasonUtf8[:120] + b"..."
        else:
            reasonUtf8 = None
        self.sendCloseFrame(code=code, reasonUtf8=reasonUtf8, isReply=False)

    # The streaming API (6.4.3, 6.4.4): one frame whose payload is written
    # in pieces, with time between them.

    def beginMessage(self, isBinary=False, doNotCompress=False):
        if self.state != STATE_OPEN:
            return
        if self.send_state != SEND_STATE_GROUND:
            raise Exception("WebSocketProtocol.beginMessage invalid in current sending state")
        self.send_message_opcode = MESSAGE_TYPE_BINARY if isBinary else MESSAGE_TYPE_TEXT
        self.send_state = SEND_STATE_MESSAGE_BEGIN

    def beginMessageFrame(self, length):
        if self.state != STATE_OPEN:
            return
        if self.send_state not in (SEND_STATE_MESSAGE_BEGIN, SEND_STATE_INSIDE_MESSAGE):
            raise Exception("WebSocketProtocol.beginMessageFrame invalid in current sending state [%d]"
                            % self.send_state)
        self.send_message_frame_length = length
        self.send_message_frame_mask = struct.pack("!I", random.getrandbits(32))
        if length > 0 and self.applyMask:
            self.send_message_frame_masker = XorMasker(self.send_message_frame_mask)
        else:
            self.send_message_frame_masker = XorMaskerNull()
        # FIN = false: a streamed message ends with an empty final frame.
        b0 = 0
        if self.send_state == SEND_STATE_MESSAGE_BEGIN:
            b0 |= self.send_message_opcode % 128
            self.send_state = SEND_STATE_INSIDE_MESSAGE
        b1 = 1 << 7
        mv = self.send_message_frame_mask
        el = b""
        if length <= 125:
            b1 |= length
        elif length <= 0xFFFF:
            b1 |= 126
            el = struct.pack("!H", length)
        else:
            b1 |= 127
            el = struct.pack("!Q", length)
        self.sendData(b"".join([bytes((b0, b1)), el, mv]))
        self.send_state = SEND_STATE_INSIDE_MESSAGE_FRAME

    def sendMessageFrameData(self, payload, sync=False):
        if self.state != STATE_OPEN:
            return
        if self.send_state != SEND_STATE_INSIDE_MESSAGE_FRAME:
            raise Exception("WebSocketProtocol.sendMessageFrameData invalid in current sending state")
        rl = len(payload)
        ptr = self.send_message_frame_masker.pointer()
        if ptr + rl > self.send_message_frame_length:
            l = self.send_message_frame_length - ptr
            rest = -(rl - l)
            pl = payload[:l]
        else:
            l = rl
            rest = self.send_message_frame_length - ptr - l
            pl = payload
        self.sendData(self.send_message_frame_masker.process(pl), sync=sync)
        if self.send_message_frame_masker.pointer() >= self.send_message_frame_length:
            self.send_state = SEND_STATE_INSIDE_MESSAGE
        return rest

    def endMessage(self):
        if self.state != STATE_OPEN:
            return
        self.sendFrame(opcode=0, payload=b"", fin=True)
        self.send_state = SEND_STATE_GROUND

    def sendMessageFrame(self, payload, sync=False):
        if self.state != STATE_OPEN:
            return
        self.beginMessageFrame(len(payload))
        self.sendMessageFrameData(payload, sync)

    def sendMessage(self, payload, isBinary=False, fragmentSize=None, sync=False, doNotCompress=False):
        """Sends a message, in frames of `fragmentSize` (or the
        autoFragmentSize) if given. As autobahn's, a payload that is an
        exact multiple of the size ends with an empty final frame."""
        assert type(payload) == bytes
        if self.state != STATE_OPEN:
            return
        opcode = 2 if isBinary else 1
        if self._perMessageCompress is not None and not doNotCompress:
            sendCompressed = True
            self.trafficStats.outgoingOctetsAppLevel += len(payload)
            self._perMessageCompress.startCompressMessage()
            payload = self._perMessageCompress.compressMessageData(payload)
            payload += self._perMessageCompress.endCompressMessage()
            self.trafficStats.outgoingOctetsWebSocketLevel += len(payload)
        else:
            sendCompressed = False
        rsv = 4 if sendCompressed else 0
        if fragmentSize is not None:
            pfs = fragmentSize
        elif self.autoFragmentSize > 0:
            pfs = self.autoFragmentSize
        else:
            pfs = None
        if pfs is None or len(payload) <= pfs:
            self.sendFrame(opcode=opcode, payload=payload, sync=sync, rsv=rsv)
        else:
            if pfs < 1:
                raise Exception("payload fragment size must be at least 1 (was %d)" % pfs)
            n = len(payload)
            i = 0
            done = False
            first = True
            while not done:
                j = i + pfs
                if j > n:
                    done = True
                    j = n
                if first:
                    self.sendFrame(opcode=opcode, payload=payload[i:j], fin=done, sync=sync, rsv=rsv)
                    first = False
                else:
                    self.sendFrame(opcode=0, payload=payload[i:j], fin=done, sync=sync)
                i += pfs
