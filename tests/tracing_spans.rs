//! Tracing: the seat picker's spans carry the event, seat, buyer and fencing token. In
//! a test binary of its own: a subscriber set for one thread must not race with other
//! tests registering the same callsites.

use reqwest::StatusCode;
use seatlock_harness::{HttpBuyer, TestApp};

/// A `MakeWriter` that appends every log line to a shared buffer.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn hold_and_confirm_spans_carry_event_seat_buyer_and_fencing_token() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_env_filter("seatlock=info")
        .finish();
    // This test's runtime has one thread, which also runs the server's tasks.
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = TestApp::builder().spawn().await.unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut buyer = HttpBuyer::new();
    for action in ["hold", "confirm"] {
        let reply = buyer.seat_action(&app.address, event, seats[0], action);
        assert_eq!(reply.await.unwrap().status, StatusCode::SEE_OTHER);
    }
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    for span in ["hold", "confirm"] {
        let prefix = format!("{span}{{event={event} seat={} buyer=", seats[0]);
        let line = text
            .lines()
            .find(|l| l.contains(&prefix))
            .unwrap_or_else(|| panic!("no {span} span in:\n{text}"));
        assert!(line.contains("fencing_token="), "{line}");
    }
}
