//! ws-tokio: the tokio-tungstenite peer of bench/run's ws scenarios. A
//! current-thread tokio runtime (one worker, one thread) accepting on the
//! address given, a task per connection echoing every data message with
//! tungstenite's defaults (no compression: tungstenite has none), as
//! tokio-tungstenite's own echo-server example (`examples/echo-server.rs`)
//! does: the read half filtered to text and binary messages and
//! `forward`ed into the write half (which feeds while messages are ready
//! and flushes when the read side would wait: several echoes per write when
//! a client sends several frames at once).

use futures_util::{future, StreamExt, TryStreamExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (write, read) = ws.split();
    let _ = read
        .try_filter(|msg| future::ready(msg.is_text() || msg.is_binary()))
        .forward(write)
        .await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let bind = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let listener = TcpListener::bind(&bind).await.expect("bind");
    println!("listening on {bind}");
    loop {
        if let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(echo(stream));
        }
    }
}
