//! The engine's error-log lines go through the `log` facade, with the
//! target `peregrine`, to whatever logger the application installed; the
//! library prints nothing itself.

mod common;

use std::sync::Mutex;

use common::{start, Client};
use peregrine::{Reply, Request};

/// Keeps every record it is given.
struct Keeper(Mutex<Vec<(log::Level, String, String)>>);

impl log::Log for Keeper {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let line = (record.level(), record.target().to_owned(), record.args().to_string());
        self.0.lock().unwrap().push(line);
    }

    fn flush(&self) {}
}

static KEEPER: Keeper = Keeper(Mutex::new(Vec::new()));

#[test]
fn engine_lines_reach_the_applications_logger() {
    log::set_logger(&KEEPER).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    // A handler bug the engine reports on its error log, and answers 500.
    let server = start(|_: &Request<'_>| Reply::Later);
    let mut client = Client::connect(server.local_addr());
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(client.response().status, 500);
    let kept = KEEPER.0.lock().unwrap().clone();
    let line = kept
        .iter()
        .find(|(_, _, text)| text.contains("Reply::Later without calling Request::defer"));
    assert!(
        matches!(line, Some((log::Level::Error, target, _)) if target == peregrine::log::TARGET),
        "{kept:?}"
    );

    // Below the level set, nothing reaches the logger.
    peregrine::log::set_level(peregrine::log::Level::Error);
    peregrine::log::info(format_args!("not kept"));
    assert!(!KEEPER.0.lock().unwrap().iter().any(|(_, _, t)| t == "not kept"));
    server.shutdown();
    server.join().unwrap();
}
