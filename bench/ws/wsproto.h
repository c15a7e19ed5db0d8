/* wsproto.h: what ws-limit.c and wsload.c share: SHA-1 and base64 for the
 * handshake's Sec-WebSocket-Accept (RFC 6455 section 4.2.2: base64 of the
 * SHA-1 of the key and the GUID), nothing else. SHA-1 as FIPS 180-4 gives
 * it, written out so that the floor links no library. */
#ifndef WSPROTO_H
#define WSPROTO_H
#include <stdint.h>
#include <string.h>

static const char WS_GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

static uint32_t ws_rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void ws_sha1_block(uint32_t h[5], const uint8_t *p) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = ws_rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
        else if (i < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
        else { f = b ^ c ^ d; k = 0xCA62C1D6; }
        uint32_t t = ws_rol(a, 5) + f + e + k + w[i];
        e = d; d = c; c = ws_rol(b, 30); b = a; a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

/* SHA-1 of msg (len < 2^29 bytes) into out[20]. */
static void ws_sha1(const uint8_t *msg, size_t len, uint8_t out[20]) {
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    size_t i = 0;
    for (; i + 64 <= len; i += 64) ws_sha1_block(h, msg + i);
    uint8_t tail[128] = {0};
    size_t rest = len - i;
    memcpy(tail, msg + i, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int j = 0; j < 8; j++) tail[tail_len - 1 - j] = (uint8_t)(bits >> (8 * j));
    for (size_t j = 0; j < tail_len; j += 64) ws_sha1_block(h, tail + j);
    for (int j = 0; j < 5; j++) {
        out[4 * j] = (uint8_t)(h[j] >> 24); out[4 * j + 1] = (uint8_t)(h[j] >> 16);
        out[4 * j + 2] = (uint8_t)(h[j] >> 8); out[4 * j + 3] = (uint8_t)h[j];
    }
}

/* Sec-WebSocket-Accept for key (key_len bytes) into out (29 bytes with NUL). */
static void ws_accept(const char *key, size_t key_len, char out[29]) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t buf[128], d[20];
    if (key_len > sizeof(buf) - sizeof(WS_GUID)) key_len = sizeof(buf) - sizeof(WS_GUID);
    memcpy(buf, key, key_len);
    memcpy(buf + key_len, WS_GUID, sizeof(WS_GUID) - 1);
    ws_sha1(buf, key_len + sizeof(WS_GUID) - 1, d);
    int o = 0;
    for (int i = 0; i < 18; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
        out[o++] = b64[v >> 18]; out[o++] = b64[(v >> 12) & 63];
        out[o++] = b64[(v >> 6) & 63]; out[o++] = b64[v & 63];
    }
    uint32_t v = (uint32_t)d[18] << 16 | (uint32_t)d[19] << 8;
    out[o++] = b64[v >> 18]; out[o++] = b64[(v >> 12) & 63]; out[o++] = b64[(v >> 6) & 63];
    out[o++] = '=';
    out[o] = 0;
}
#endif
