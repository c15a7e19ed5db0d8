/* ws-facil: the facil.io peer of bench/run's ws scenarios (facil.io 0.7,
 * the C core under zap). Every WebSocket message on any path is written
 * back as it came (text as text, binary as binary) with websocket_write,
 * as the echo branch of its examples/benchmarks/websocket_shootout.c does.
 * One process, one thread (fio_start .threads = 1, .workers = 1). facil.io
 * has no permessage-deflate. Usage: ws-facil PORT */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>

static void on_message(ws_s *ws, fio_str_info_s msg, uint8_t is_text) {
  websocket_write(ws, msg, is_text);
}

static void on_request(http_s *h) { http_send_error(h, 404); }

static void on_upgrade(http_s *h, char *target, size_t len) {
  if (len == 9 && target[0] == 'w') {
    http_upgrade2ws(h, .on_message = on_message);
  } else {
    http_send_error(h, 400);
  }
}

int main(int argc, char **argv) {
  const char *port = argc > 1 ? argv[1] : "3000";
  if (http_listen(port, "127.0.0.1", .on_request = on_request, .on_upgrade = on_upgrade,
                  .max_body_size = (1 << 20), .ws_max_msg_size = (1 << 20), .timeout = 0,
                  .ws_timeout = 0) == -1) {
    perror("http_listen");
    return 1;
  }
  printf("listening on 127.0.0.1:%s\n", port);
  fflush(stdout);
  fio_start(.threads = 1, .workers = 1);
  return 0;
}
