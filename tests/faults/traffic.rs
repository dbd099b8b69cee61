//! Background buyers over a set of servers, and what they must never see.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rand::Rng;
use reqwest::header::HeaderMap;
use seatlock::failpoint::PausePoint;
use seatlock::http::buyer::BUYER_COOKIE;
use seatlock::http::error::Refusal;
use seatlock_harness::{HttpBuyer, Reply};

use crate::deployment::*;

/// Background buyers over a set of servers, until stopped. Each buyer keeps one browser
/// session; each attempt holds a seat near a cursor that moves on every half second, then
/// confirms (one time in ten with a pause longer than the hold: a stalled holder),
/// releases, or walks away, each through a server picked at random. Counts every outcome
/// by name.
pub(crate) struct Traffic {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<()>>,
    pub(crate) tally: Arc<Tally>,
}

/// What the traffic saw.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) outcomes: Mutex<BTreeMap<String, u64>>,
    /// Every confirm answered with an order: (order id, seat, buyer id).
    pub(crate) confirmed: Mutex<Vec<(i64, i64, String)>>,
}

impl Tally {
    pub(crate) fn count(&self, outcome: String) {
        *self.outcomes.lock().unwrap().entry(outcome).or_default() += 1;
    }

    pub(crate) fn requests(&self) -> u64 {
        self.outcomes.lock().unwrap().values().sum()
    }
}

/// Names a reply for the tally.
pub(crate) fn outcome(action: &str, reply: &anyhow::Result<Reply>) -> String {
    let Ok(reply) = reply else {
        return format!("{action}: no answer (server stopped or killed)");
    };
    if let Some(code) = &reply.refusal {
        return format!("{action}: {} {code}", reply.status.as_u16());
    }
    let says = [
        ("Redis is unavailable", "Redis unavailable"),
        ("Postgres is unavailable", "Postgres unavailable"),
        ("You do not hold this seat", "not your hold"),
    ]
    .into_iter()
    .find(|(text, _)| reply.body.contains(text))
    .map_or("", |(_, name)| name);
    format!("{action}: {} {says}", reply.status.as_u16())
}

impl Traffic {
    pub(crate) fn start(
        d: &Deployment,
        servers: Arc<RwLock<Vec<String>>>,
        seats: Vec<i64>,
        buyers: usize,
    ) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        // Buyers crowd the 4 seats after `cursor`; a seat found sold moves it on.
        let cursor = Arc::new(AtomicUsize::new(0));
        let pause_ms = d.settings.hold_ttl_ms * 3 / 2;
        let tasks = (0..buyers)
            .map(|_| {
                let mut buyer = TrafficBuyer {
                    event: d.event,
                    servers: servers.clone(),
                    tally: tally.clone(),
                    http: HttpBuyer::new(),
                    id: None,
                    session: None,
                };
                let (stop, seats, cursor) = (stop.clone(), seats.clone(), cursor.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let (at, roll) = {
                            let mut rng = rand::rng();
                            let at = cursor.load(Ordering::Relaxed) + rng.random_range(0..4);
                            (at, rng.random_range(0..100))
                        };
                        let seat = seats[at % seats.len()];
                        if buyer.attempt(seat, roll, pause_ms).await {
                            cursor.fetch_max(at + 1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Traffic { stop, tasks, tally }
    }

    /// Stops the buyers (each finishes its attempt) and returns the tally.
    pub(crate) async fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        self.tally
    }
}

/// One background buyer: a browser session used across attempts.
pub(crate) struct TrafficBuyer {
    pub(crate) event: i64,
    pub(crate) servers: Arc<RwLock<Vec<String>>>,
    pub(crate) tally: Arc<Tally>,
    pub(crate) http: HttpBuyer,
    /// The public buyer id, once a page was read.
    pub(crate) id: Option<String>,
    /// The buyer cookie `id` was read under: a server that cannot verify it (another
    /// secret) mints a new buyer, whose id this buyer must read again.
    pub(crate) session: Option<String>,
}

impl TrafficBuyer {
    /// A server picked at random.
    pub(crate) fn server(&self) -> String {
        let servers = self.servers.read().unwrap();
        servers[rand::rng().random_range(0..servers.len())].clone()
    }

    /// POSTs `action` on `seat` through a random server, with `headers`; counts it.
    pub(crate) async fn act(
        &self,
        seat: i64,
        action: &str,
        headers: HeaderMap,
    ) -> anyhow::Result<Reply> {
        let url = format!(
            "{}/events/{}/seats/{seat}/{action}",
            self.server(),
            self.event
        );
        let reply = self.http.another_tab(headers).post(&url, &[]).await;
        self.tally.count(outcome(action, &reply));
        reply
    }

    /// The buyer cookie this buyer sends (the same to every server of the deployment).
    fn session_cookie(&self) -> Option<String> {
        self.http.cookie(&self.server(), BUYER_COOKIE)
    }

    /// Whether the server made this buyer a new buyer since its id was read: then the id
    /// is forgotten, to be read again.
    fn lost_session(&mut self) -> bool {
        let lost = self.session_cookie() != self.session;
        if lost {
            self.id = None;
        }
        lost
    }

    /// Reads the page first if the buyer is new; then holds
    /// `seat` and by `roll` (0..100) walks away (< 20), releases (< 35) or confirms,
    /// pausing past the hold when `roll` < 45. Returns whether the seat turned out to be
    /// sold already.
    pub(crate) async fn attempt(&mut self, seat: i64, roll: u32, pause_ms: u64) -> bool {
        let Some(id) = self.id.clone() else {
            let page = self
                .http
                .get(&format!("{}/events/{}", self.server(), self.event))
                .await;
            self.tally.count(outcome("page", &page));
            self.id = page.ok().and_then(|p| page_buyer_id(&p.body));
            self.session = self.session_cookie();
            tokio::time::sleep(Duration::from_millis(20)).await;
            return false;
        };
        let hold = self.act(seat, "hold", HeaderMap::new()).await;
        if self.lost_session() {
            return false; // held, if at all, by a guest whose id this buyer has not read
        }
        match hold {
            Ok(hold) if hold.status == SEE_OTHER => {}
            Ok(hold) if hold.is_refused(&Refusal::AlreadySold) => return true,
            _ => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return false;
            }
        }
        let (action, headers) = match roll {
            0..20 => return false,
            20..35 => ("release", HeaderMap::new()),
            35..45 => ("confirm", pause_headers(PausePoint::BeforeWrite, pause_ms)),
            _ => ("confirm", HeaderMap::new()),
        };
        let reply = self.act(seat, action, headers).await;
        if let Ok(Reply {
            status: SEE_OTHER,
            location: Some(location),
            ..
        }) = &reply
            && let Some(order) = location.strip_prefix("/orders/")
        {
            // Bought under the session the hold was made in, hence by `id`: a session
            // lost before the confirm read it leaves a guest with no hold (403).
            let order = order.parse().expect("an order id");
            self.tally.confirmed.lock().unwrap().push((order, seat, id));
        }
        self.lost_session();
        false
    }
}

/// Every confirm that was answered with an order has that order, for that seat and
/// buyer, in Postgres: no acknowledged sale was lost.
pub(crate) async fn assert_no_acknowledged_sale_lost(d: &Deployment, tally: &Tally) {
    let confirmed = tally.confirmed.lock().unwrap().clone();
    for (order, seat, buyer) in confirmed {
        let row: Option<(i64, String)> =
            sqlx::query_as("SELECT seat_id, buyer_id FROM orders WHERE id = $1")
                .bind(order)
                .fetch_optional(&d.db)
                .await
                .unwrap();
        assert_eq!(row, Some((seat, buyer)), "order {order}");
    }
}

/// No reply was a 5xx other than 503 (an unavailable store, named).
pub(crate) fn assert_only_503s(tally: &Tally) {
    let outcomes = tally.outcomes.lock().unwrap();
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|(name, _)| name.contains(": 5") && !name.contains(": 503"))
        .collect();
    assert!(bad.is_empty(), "{bad:?} in {outcomes:#?}");
}
