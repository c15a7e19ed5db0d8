// ws-node: the Node peer of bench/run's ws scenarios, the `ws` package
// (npm) echoing every message on any path, compression off
// (perMessageDeflate: false, also its default for servers), binary as
// binary. One process, one event loop.
'use strict';
const { WebSocketServer } = require('ws');

const [host, port] = (process.argv[2] || '127.0.0.1:8080').split(':');
const wss = new WebSocketServer({ host, port: Number(port), perMessageDeflate: false, maxPayload: 1 << 20 });
wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
});
wss.on('listening', () => console.log(`listening on ${host}:${port}`));
