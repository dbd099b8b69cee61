//! The round-trip budget: what each operation costs the lock store (Redis) and the
//! database (Postgres), counted on the wire, through the real HTTP flow.
//!
//! | operation | Redis (lock store) | Postgres |
//! |---|---|---|
//! | hold | 1 script (`FCALL`: the lease, refused if the seat is sold) | **none** (the seat and the event's start are read once per event and process, before the measured hold) |
//! | release | 1 script (the owner token found by the buyer's id inside it) | **none** |
//! | renew | 1 script | none |
//! | "Need more time?" (extend every hold of the buyer's) | the buyer's holds (1 script, `held_by.lua`) + each hold's owner token (1 script per hold) + the extension (1 script, `extend.lua`) | **none** |
//! | confirm | the buyer's live lease (1 script, found by the buyer's id) + the owner check (`GET`) + the release that retires the seat (1 script) | the payment's authorization + 1 transaction (BEGIN, the fenced write, COMMIT) |
//! | bid | lock (1 script) + release (1 script) | 1 transaction (BEGIN, read, fenced write, COMMIT); the first bid on an item in a process also reads that it exists |
//! | waiting room: a new arrival's join | 1 script (`join.lua`) | **none** |
//! | waiting room: a queued buyer's page, poll, stream tick | **none** (their ticket and the room's state in memory) | **none** |
//! | waiting room: taking the turn or renewing it (a map view), leave | 1 script each (`arrive.lua`, `leave.lua`) | none |
//! | hold behind a waiting room | the same 1 script (the admission is checked inside it) | none |
//! | seat map | 1 pipeline (`TIME` + `HGETALL`), the same for 32 and 11,056 seats | 3 reads, the same for both |
//!
//! No session is read or written on these paths: the buyer is known from their signed
//! cookie, and their holds are found in Redis by their id ([`seatlock::http::buyer`]).
//! So a hold and a release are each **one** Redis round trip and no Postgres one. Only
//! a buyer who gave a name has a session, read where the name is shown or written (a
//! page, the order); session traffic is counted apart from the commands above.
//!
//! The pool's connection checks are counted with Postgres's round trips (sqlx pings
//! every connection returned to the pool, and the server pings one before use only if it
//! sat idle for a second or more).
//!
//! How it counts:
//! * **Redis**: a private `redis-server` per test ([`RedisServer`]). `INFO commandstats`
//!   deltas count the scripts (`evalsha` + `eval` + `fcall` calls: the grant is a function,
//!   `lease/src/redis/library.rs`). Redis also counts there every
//!   command a script runs inside the server, so the *top-level* commands, the ones the
//!   client sent, come from the slow log with a 0 µs threshold: each entry names the
//!   client, and commands run by a script carry the Lua pseudo-client (address `?:0`).
//!   A command whose key is a session key (`<namespace>:session:<id>`) is session
//!   traffic.
//! * **Postgres**: the server under test reaches Postgres through a TCP proxy
//!   ([`PgWire`], shared with `make bench`) that reads the client half of the wire
//!   protocol (v3): simple queries (`Q`), extended-protocol executions
//!   (`Parse`/`Bind`/`Execute`, resolved to their SQL) and `Sync`s. A `Sync` with nothing
//!   before it is a ping. This counts what was sent, whatever the statistics collector has
//!   flushed, and tells each statement apart.
//!
//! Run with `--nocapture` to see the table.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use seatlock::config::LeaseNamespace;
use seatlock::http::error::Refusal;
use seatlock_harness::pgwire::{PgCost, PgWire};
use seatlock_harness::{DEMO_VENUES, HttpBuyer, RedisServer, TINY_VENUES, TestApp};

/// What one operation cost Redis.
#[derive(Debug, Default)]
struct RedisCost {
    /// Commands the clients sent, lowercase, in order (slow log), session traffic apart.
    commands: Vec<String>,
    /// Session loads (`GET` of a session key).
    session_loads: usize,
    /// Session writes (any other command on a session key).
    session_writes: usize,
    /// `evalsha` + `eval` + `fcall` calls (INFO commandstats).
    scripts: u64,
    /// Commands run inside scripts (INFO commandstats minus the top-level ones).
    inside_scripts: u64,
}

impl RedisCost {
    /// Round trips: the commands plus the session's.
    fn round_trips(&self) -> usize {
        self.commands.len() + self.session_loads + self.session_writes
    }
}

/// The private Redis and a connection that reads its counters.
struct RedisCounter {
    conn: redis::aio::MultiplexedConnection,
    /// The start of every session key of the server under test (`<namespace>:session:`).
    sessions: String,
}

const COUNTER_NAME: &str = "round-trip-counter";

impl RedisCounter {
    async fn new(server: &RedisServer, namespace: &LeaseNamespace) -> RedisCounter {
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        for (setting, value) in [
            ("slowlog-log-slower-than", "0"),
            ("slowlog-max-len", "100000"),
        ] {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(setting)
                .arg(value)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(COUNTER_NAME)
            .query_async(&mut conn)
            .await
            .unwrap();
        RedisCounter {
            conn,
            sessions: namespace.session_key(""),
        }
    }

    /// Zeroes the command statistics and the slow log.
    async fn reset(&mut self) {
        let () = redis::pipe()
            .cmd("CONFIG")
            .arg("RESETSTAT")
            .ignore()
            .cmd("SLOWLOG")
            .arg("RESET")
            .ignore()
            .query_async(&mut self.conn)
            .await
            .unwrap();
    }

    /// What clients other than this one made Redis do since [`RedisCounter::reset`].
    async fn cost(&mut self) -> RedisCost {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await
            .unwrap();
        let calls: HashMap<String, u64> = info
            .lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats.strip_prefix("calls=")?.split(',').next()?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect();
        let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut self.conn)
            .await
            .unwrap();
        let mut cost = RedisCost::default();
        for entry in entries.into_iter().rev() {
            // (arguments as bytes: a session's value is MessagePack, not text)
            let (args, client, name): (Vec<Vec<u8>>, String, String) = match entry {
                redis::Value::Array(fields) if fields.len() >= 6 => (
                    redis::from_redis_value(fields[3].clone()).unwrap(),
                    redis::from_redis_value(fields[4].clone()).unwrap(),
                    redis::from_redis_value(fields[5].clone()).unwrap(),
                ),
                other => panic!("unexpected slow log entry {other:?}"),
            };
            if name == COUNTER_NAME {
                continue;
            }
            let command = String::from_utf8_lossy(&args[0]).to_lowercase();
            let on_session = args
                .get(1)
                .is_some_and(|key| key.starts_with(self.sessions.as_bytes()));
            if ticker(&args) {
                continue;
            }
            if client.starts_with('?') {
                cost.inside_scripts += 1;
            } else if on_session && command == "get" {
                cost.session_loads += 1;
            } else if on_session {
                cost.session_writes += 1;
            } else if command != "ping" && command != "config" {
                // (a PING is the live feed's heartbeat, once a second, and CONFIG its check
                // of the server's settings, every few seconds: not the operation's)
                cost.commands.push(command);
            }
        }
        cost.scripts = ["evalsha", "eval", "fcall"]
            .iter()
            .map(|c| calls.get(*c).copied().unwrap_or(0))
            .sum();
        cost
    }
}

/// Whether a command the slow log shows is a waiting room's ticker at work, once a second
/// in the background and not the operation's: a step of the room (`tick.lua`: its first
/// key the room's hash, and the group's channel among its arguments, which no other room
/// script has) or the ticker's own lease (group `<namespace>:room:<event>`).
fn ticker(args: &[Vec<u8>]) -> bool {
    let text: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let step = text.get(3).is_some_and(|k| k.ends_with(":~room"))
        && text.iter().any(|a| a.ends_with(":~events"));
    step || text.iter().any(|a| a.contains(":room:"))
}

/// A server over a fresh database (tiny venue and the demo venues) whose Postgres
/// traffic goes through a [`PgWire`] and whose Redis is private.
struct Harness {
    app: TestApp,
    pg: PgWire,
    redis: RedisCounter,
    _redis_server: RedisServer,
    rows: Vec<String>,
}

impl Harness {
    async fn start(venues: &str) -> Harness {
        let redis_server = RedisServer::start().await.unwrap();
        let mut settings = TestApp::builder()
            .venues(venues)
            .redis(redis_server.url())
            .with(|s| s.close_interval_ms = 0) // no closer polling in the background
            .settings()
            .await
            .unwrap();
        let (pg, proxied) = PgWire::in_front_of(&settings.database_url).await.unwrap();
        settings.database_url = proxied;
        let redis = RedisCounter::new(&redis_server, &settings.lease_namespace).await;
        let app = TestApp::spawn(settings).await.unwrap();
        Harness {
            app,
            pg,
            redis,
            _redis_server: redis_server,
            rows: Vec::new(),
        }
    }

    /// Runs `operation` and returns what it cost each store; adds a row to the report.
    async fn measure<T>(
        &mut self,
        label: &str,
        operation: impl std::future::Future<Output = T>,
    ) -> (T, RedisCost, PgCost) {
        self.pg.settle().await;
        self.redis.reset().await;
        let from = self.pg.len();
        let out = operation.await;
        self.pg.settle().await;
        let redis = self.redis.cost().await;
        let pg = PgCost::of(&self.pg.since(from));
        self.rows.push(format!(
            "| {label} | {} ({}) | {} | {} / {} | {} | {} | {} | {} ({} pings) |",
            redis.commands.len(),
            redis.commands.join(", "),
            redis.inside_scripts,
            redis.session_loads,
            redis.session_writes,
            redis.round_trips(),
            pg.transactions,
            pg.statements.len(),
            pg.round_trips,
            pg.pings,
        ));
        (out, redis, pg)
    }

    fn print(&self) {
        println!(
            "| operation | Redis commands sent | run inside scripts | session loads / writes (Redis) | Redis round trips | Postgres transactions | Postgres statements | Postgres round trips |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for row in &self.rows {
            println!("{row}");
        }
    }
}

#[tokio::test]
async fn seat_operations_stay_within_their_round_trip_budget() {
    let mut h = Harness::start(TINY_VENUES).await;
    let (event, seats) = h.app.first_event_seats().await.unwrap();
    let base = h.app.address.clone();
    let mut buyer = HttpBuyer::new();
    // Warm up: the session, the event's seats read by this process, the scripts loaded in
    // this Redis (the first call of one costs two more round trips: NOSCRIPT, then
    // SCRIPT LOAD), the first fence block.
    buyer.get(&format!("{base}/events/{event}")).await.unwrap();
    for (seat, action) in [(1, "hold"), (1, "release"), (3, "hold"), (3, "confirm")] {
        let reply = buyer.seat_action(&base, event, seats[seat], action).await;
        assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    }

    let hold = buyer.seat_action(&base, event, seats[0], "hold");
    let (reply, redis, pg) = h.measure("hold", hold).await;
    assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    assert_eq!(redis.commands, ["fcall"], "hold: one script");
    assert_eq!(redis.scripts, 1);
    assert_eq!(
        redis.session_loads + redis.session_writes,
        0,
        "hold: no session"
    );
    assert_eq!(redis.round_trips(), 1);
    assert_eq!(pg, PgCost::default(), "hold: no Postgres round trip");

    let release = buyer.seat_action(&base, event, seats[0], "release");
    let (reply, redis, pg) = h.measure("release", release).await;
    assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    assert_eq!(redis.commands, ["evalsha"], "release: one script");
    assert_eq!(
        redis.session_loads + redis.session_writes,
        0,
        "release: no session"
    );
    assert_eq!(redis.round_trips(), 1);
    assert_eq!(pg, PgCost::default(), "release: no Postgres round trip");

    let hold = buyer.seat_action(&base, event, seats[0], "hold").await;
    assert_eq!(hold.unwrap().status, StatusCode::SEE_OTHER);
    let confirm = buyer.seat_action(&base, event, seats[0], "confirm");
    let (reply, redis, pg) = h.measure("confirm", confirm).await;
    assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    assert_eq!(
        redis.commands,
        ["evalsha", "get", "evalsha"],
        "confirm: the buyer's live lease, the owner check with the row locked, the \
         release (and the seat's retirement) after the commit"
    );
    assert_eq!(pg.transactions, 1, "confirm: one transaction {pg:?}");
    assert_eq!(
        pg.statements.len(),
        2,
        "confirm: the payment's authorization, the fenced write {pg:?}"
    );
    assert_eq!(
        pg.in_transaction, 1,
        "confirm: the fenced write inside the transaction"
    );
    assert_eq!(
        redis.session_loads + redis.session_writes,
        0,
        "confirm: no session"
    );

    // The sold seat is refused by the lease script: still no Postgres.
    let mut other = HttpBuyer::new();
    other.get(&format!("{base}/events/{event}")).await.unwrap();
    let late = other.seat_action(&base, event, seats[0], "hold");
    let (reply, redis, pg) = h.measure("hold of a sold seat", late).await;
    assert!(reply.unwrap().is_refused(&Refusal::AlreadySold));
    assert_eq!(redis.commands, ["fcall"], "refused by the script");
    assert_eq!(redis.session_writes, 0, "nothing to remember");
    assert_eq!(pg, PgCost::default(), "hold of a sold seat: no Postgres");

    let key = h.app.seat_key(event, seats[2]);
    let ttl = Duration::from_secs(60);
    let leases = h.app.state.leases.clone();
    // The first call of a script on a Redis server costs two more round trips (NOSCRIPT,
    // then SCRIPT LOAD): renew once so its script is loaded.
    let mut warm = leases.acquire(&key, "b", ttl).await.unwrap();
    assert!(leases.renew(&mut warm).await.unwrap());
    assert!(leases.release(&warm).await.unwrap());
    let (lease, redis, pg) = h
        .measure("lease acquire (library)", leases.acquire(&key, "b", ttl))
        .await;
    let mut lease = lease.unwrap();
    assert_eq!(redis.commands, ["fcall"]);
    assert_eq!(pg, PgCost::default(), "the fence block is reserved already");
    let (renewed, redis, _) = h.measure("renew", leases.renew(&mut lease)).await;
    assert!(renewed.unwrap());
    assert_eq!(redis.commands, ["evalsha"], "renew: one script");
    let (released, redis, _) = h
        .measure("lease release (library)", leases.release(&lease))
        .await;
    assert!(released.unwrap());
    assert_eq!(redis.commands, ["evalsha"]);
    h.print();
}

/// "Need more time?" is not on the hot path, and its cost is pinned all the same: the
/// buyer's holds are read once (their own set, not the event's every hold), each hold's owner token found by the buyer's id, then
/// one script extends them all. No Postgres, no session.
#[tokio::test]
async fn need_more_time_costs_a_read_a_script_per_hold_and_one_extension() {
    let mut h = Harness::start(TINY_VENUES).await;
    let (event, seats) = h.app.first_event_seats().await.unwrap();
    let base = h.app.address.clone();
    let mut buyer = HttpBuyer::new();
    buyer.get(&format!("{base}/events/{event}")).await.unwrap();
    for seat in [seats[0], seats[1]] {
        let reply = buyer.seat_action(&base, event, seat, "hold").await;
        assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    }
    let url = format!("{base}/events/{event}/extend");
    // Warm up: the scripts' first calls on this Redis load them.
    assert_eq!(
        buyer.post(&url, &[]).await.unwrap().status,
        StatusCode::SEE_OTHER
    );
    let (reply, redis, pg) = h.measure("extend, 2 holds", buyer.post(&url, &[])).await;
    assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    assert_eq!(
        redis.commands,
        ["evalsha", "evalsha", "evalsha", "evalsha"],
        "the buyer's holds (held_by.lua), each hold's owner token, the extension"
    );
    assert_eq!(redis.session_loads + redis.session_writes, 0, "no session");
    assert_eq!(pg, PgCost::default(), "extend: no Postgres round trip");
    h.print();
}

#[tokio::test]
async fn a_seat_map_costs_the_same_round_trips_for_32_and_11056_seats() {
    let mut tiny = Harness::start(TINY_VENUES).await;
    let mut demo = Harness::start(DEMO_VENUES).await;
    let arena: i64 = sqlx::query_scalar(
        "SELECT e.id FROM events e JOIN venues v ON v.id = e.venue_id WHERE v.slug = 'harbour-arena'",
    )
    .fetch_one(demo.app.db())
    .await
    .unwrap();
    let (tiny_event, _) = tiny.app.first_event_seats().await.unwrap();
    let mut costs = Vec::new();
    for (h, event, label) in [
        (&mut tiny, tiny_event, "seat map, 32 seats"),
        (&mut demo, arena, "seat map, 11,056 seats"),
    ] {
        let mut buyer = HttpBuyer::new();
        let url = format!("{}/events/{event}", h.app.address);
        // A first view (no cookie yet) writes no session: a look costs the stores nothing
        // lasting. It reads the event's board (shared by every view for a second), and
        // nothing of the buyer's own: a buyer new on this request has no holds.
        let (page, redis, _) = h.measure(label, buyer.get(&url)).await;
        assert_eq!(page.unwrap().status, StatusCode::OK);
        assert_eq!(redis.session_loads + redis.session_writes, 0, "no session");
        assert_eq!(
            redis.commands,
            ["time", "hgetall"],
            "the board: one pipeline"
        );
        // A returning buyer's view adds their own holds (one script) and tickets (one
        // query) to the shared board. The board is read again at most once a second, and
        // a script's first call on a server loads it (NOSCRIPT, SCRIPT LOAD): a view that
        // did either is measured again, at once.
        let mut returning = None;
        for _ in 0..5 {
            let (page, redis, pg) = h.measure(label, buyer.get(&url)).await;
            assert_eq!(page.unwrap().status, StatusCode::OK);
            assert_eq!(redis.session_loads + redis.session_writes, 0, "no session");
            assert_eq!(pg.transactions, 0);
            let once = ["hgetall", "script"].map(str::to_owned);
            if !redis.commands.iter().any(|c| once.contains(c)) {
                returning = Some((redis.commands, pg.statements.len()));
                break;
            }
        }
        let (commands, statements) = returning.expect("a view within the board's second");
        assert_eq!(commands, ["evalsha"], "the buyer's holds: one script");
        assert_eq!(statements, 1, "the buyer's tickets: one query");
        costs.push((commands, statements));
        h.print();
    }
    assert_eq!(
        costs[0], costs[1],
        "a seat map's round trips do not grow with its size"
    );
}

#[tokio::test]
async fn a_bid_is_a_lock_one_transaction_and_a_release() {
    let mut h = Harness::start(TINY_VENUES).await;
    let item = seatlock_harness::auction_item("Round-trip lamp");
    let id = seatlock::auction::queries::insert_item(h.app.db(), &item)
        .await
        .unwrap()
        .unwrap();
    let url = format!("{}/auctions/{id}", h.app.address);
    let mut bidder = HttpBuyer::new();
    bidder.get(&url).await.unwrap();
    let bids = format!("{url}/bids");
    let warm_up = bidder.post(&bids, &[("amount", "10.00")]);
    assert_eq!(warm_up.await.unwrap().status, StatusCode::SEE_OTHER);

    let bid = bidder.post(&bids, &[("amount", "11.00")]);
    let (reply, redis, pg) = h.measure("bid", bid).await;
    assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    assert_eq!(redis.commands, ["fcall", "evalsha"], "lock and release");
    assert_eq!(pg.transactions, 1, "one transaction {pg:?}");
    assert_eq!(
        pg.in_transaction,
        pg.statements.len(),
        "every statement inside it (the item is known to exist after the first bid) {pg:?}"
    );
    assert_eq!(
        redis.session_loads, 0,
        "a bidder without a name has no session"
    );
    h.print();
}

#[tokio::test]
async fn a_queued_browser_costs_no_round_trip_and_a_join_one_script() {
    let mut h = Harness::start(TINY_VENUES).await;
    let (event, seats) = h.app.first_event_seats().await.unwrap();
    // A room of one, set before this process reads the event.
    sqlx::query("UPDATE events SET waiting_room_shoppers = 1 WHERE id = $1")
        .bind(event)
        .execute(h.app.db())
        .await
        .unwrap();
    let base = h.app.address.clone();
    let (map, queue) = (
        format!("{base}/events/{event}"),
        format!("{base}/events/{event}/queue"),
    );
    // Warm up: the scripts loaded, the event read; A joins, its turn comes, it shops,
    // holds and releases.
    let mut a = HttpBuyer::new();
    let mut turn = false;
    for _ in 0..100 {
        let page = a.get(&map).await.unwrap();
        turn = page.status == StatusCode::OK && !page.body.contains("id=\"queue\"");
        if turn {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(turn, "A's turn came within 10 s");
    // The ticker's watchdog renews its lease every 5 s / 3: after one renewal its script
    // is loaded, and a SCRIPT LOAD cannot fall into a measurement.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for action in ["hold", "release"] {
        let reply = a.seat_action(&base, event, seats[1], action).await.unwrap();
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
    }
    // And someone joins the line and leaves it (the leave script loaded).
    let mut c = HttpBuyer::new();
    c.get(&map).await.unwrap();
    c.get(&queue).await.unwrap(); // the page's form token
    let leave_url = format!("{queue}/leave");
    assert_eq!(
        c.post(&leave_url, &[]).await.unwrap().status,
        StatusCode::SEE_OTHER
    );

    let mut b = HttpBuyer::new();
    let (reply, redis, pg) = h.measure("queue: a new arrival", b.get(&map)).await;
    let reply = reply.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply.body.contains("id=\"queue\""),
        "the queue page, not the map"
    );
    assert_eq!(
        redis.commands,
        ["evalsha"],
        "the join: one script, no seat map read"
    );
    assert_eq!(redis.session_writes, 0, "a new buyer writes no session");
    assert_eq!(pg, PgCost::default(), "the arrival: no Postgres");

    for label in ["queue: the page", "queue: a poll (the page reloading)"] {
        let (reply, redis, pg) = h.measure(label, b.get(&queue)).await;
        assert_eq!(reply.unwrap().status, StatusCode::OK);
        assert_eq!(
            redis.round_trips(),
            0,
            "{label}: the ticket and the room in memory"
        );
        assert_eq!(pg, PgCost::default(), "{label}: no Postgres");
    }
    let (reply, redis, _) = h.measure("queue: the map, still queued", b.get(&map)).await;
    assert!(
        reply.unwrap().body.contains("id=\"queue\""),
        "the queue page again"
    );
    assert_eq!(
        redis.round_trips(),
        0,
        "sent to the queue from the ticket alone"
    );

    // The stream: its ticks (one room message a second) cost nothing either.
    let stream_url = format!("{queue}/stream");
    let mut stream = seatlock_harness::http::EventStream::open_as(&b, &stream_url)
        .await
        .unwrap();
    assert_eq!(stream.next().await.0, "position");
    let ticks = tokio::time::sleep(Duration::from_millis(2_500));
    let (_, redis, pg) = h.measure("queue: the stream, 2.5 s of ticks", ticks).await;
    assert_eq!(redis.round_trips(), 0, "a stream tick: no Redis: {redis:?}");
    assert_eq!(pg, PgCost::default(), "a stream tick: no Postgres");
    drop(stream);

    let view = a.get(&map);
    let (reply, redis, _) = h.measure("queue: an admitted buyer's map view", view).await;
    let reply = reply.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert!(!reply.body.contains("id=\"queue\""), "the map");
    assert_eq!(
        redis.commands.first().map(String::as_str),
        Some("evalsha"),
        "the renewal: one script, then the map's own reads"
    );

    let hold = a.seat_action(&base, event, seats[0], "hold");
    let (reply, redis, pg) = h.measure("hold behind the room", hold).await;
    assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    assert_eq!(
        redis.commands,
        ["fcall"],
        "the admission is checked inside the hold's script"
    );
    assert_eq!(redis.round_trips(), 1, "as without a room");
    assert_eq!(pg, PgCost::default());

    let refused = b.seat_action(&base, event, seats[2], "hold");
    let (reply, redis, _) = h.measure("hold refused: not admitted", refused).await;
    assert!(reply.unwrap().is_refused(&Refusal::NotAdmitted));
    assert_eq!(redis.commands, ["fcall"]);
    assert_eq!(redis.session_writes, 0, "nothing to remember");

    let leave = b.post(&leave_url, &[]);
    let (reply, redis, _) = h.measure("leave", leave).await;
    assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    assert_eq!(redis.commands, ["evalsha"], "leave: one script");
    h.print();
}
