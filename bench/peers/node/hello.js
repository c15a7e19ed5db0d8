// hello.js: the Node.js peer: the core `http` module answering
// "Hello, World!" as text/plain on every path, one process, no cluster.
'use strict';
const http = require('http');

const bind = process.argv[2] || '127.0.0.1:8080';
const [host, port] = [bind.slice(0, bind.lastIndexOf(':')), Number(bind.slice(bind.lastIndexOf(':') + 1))];
const body = Buffer.from('Hello, World!');
const headers = { 'Content-Type': 'text/plain', 'Content-Length': body.length };

const server = http.createServer((req, res) => {
  res.writeHead(200, headers);
  res.end(body);
});
// Node closes idle keep-alive connections after 5 s by default; the other
// peers keep them, and idle10k needs them open for the whole measurement.
server.keepAliveTimeout = 600 * 1000;
// Listen backlog as the other peers (Go uses somaxconn, nginx and limit 4096).
server.listen({ host, port, backlog: 4096 });
