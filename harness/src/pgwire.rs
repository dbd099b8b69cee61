//! Counting what a server sends Postgres, on the wire: [`PgWire`] is a TCP proxy in front
//! of Postgres that reads the client half of the wire protocol (v3): simple queries
//! (`Q`), extended-protocol executions (`Parse`/`Bind`/`Execute`, resolved to their SQL)
//! and `Sync`s. A `Sync` with nothing before it is a ping (sqlx checks every connection
//! returned to its pool that way). [`PgCost::of`] sorts a stretch of that log into
//! transactions, statements and round trips. This counts what was sent,
//! whatever the statistics collector has flushed, and tells each statement apart.
//!
//! Used by `tests/round_trips.rs` (the round-trip budget) and `make bench`
//! (`hold_postgres_round_trips`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One message of the client half of the Postgres protocol, as logged by [`PgWire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgMessage {
    /// A simple query (`Q`), e.g. `BEGIN`.
    Query(String),
    /// An `Execute` of a prepared statement, with its SQL.
    Execute(String),
    /// A `Sync` ending a batch of extended-protocol messages: one round trip.
    Sync,
    /// A `Sync` with nothing before it: a connection check (sqlx's ping).
    Ping,
}

/// A TCP proxy on loopback in front of Postgres that logs what its clients send. Stops
/// accepting when dropped.
pub struct PgWire {
    /// The address to connect to instead of Postgres.
    pub address: SocketAddr,
    log: Arc<Mutex<Vec<PgMessage>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl PgWire {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<PgWire> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let accepted = log.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, accepted.clone()));
            }
        });
        Ok(PgWire {
            address,
            log,
            accept,
        })
    }

    /// A proxy in front of the Postgres that `database_url` names, and the URL that
    /// reaches the same database through it (`sslmode=disable`, so that the proxy reads
    /// plain messages). Errors: a URL without a host, an unresolvable host.
    pub async fn in_front_of(database_url: &str) -> anyhow::Result<(PgWire, String)> {
        let mut url = reqwest::Url::parse(database_url).context("parsing DATABASE_URL")?;
        let host = url.host_str().context("DATABASE_URL has no host")?;
        let upstream = tokio::net::lookup_host((host, url.port().unwrap_or(5432)))
            .await?
            .next()
            .with_context(|| format!("{host} does not resolve"))?;
        let wire = PgWire::start(upstream).await?;
        url.set_host(Some("127.0.0.1"))?;
        url.set_port(Some(wire.address.port()))
            .map_err(|()| anyhow::anyhow!("DATABASE_URL cannot take a port"))?;
        url.set_query(Some("sslmode=disable"));
        Ok((wire, url.into()))
    }

    /// Messages logged so far.
    pub fn len(&self) -> usize {
        self.log
            .lock()
            .expect("the log lock is never poisoned")
            .len()
    }

    /// Whether nothing was logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages logged since the `from`-th.
    pub fn since(&self, from: usize) -> Vec<PgMessage> {
        self.log.lock().expect("the log lock is never poisoned")[from..].to_vec()
    }

    /// Waits until nothing new has arrived for 100 ms (sqlx checks a connection in a
    /// background task after it is returned), at most 3 s.
    pub async fn settle(&self) {
        let mut seen = self.len();
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if self.len() == seen {
                return;
            }
            seen = self.len();
        }
    }
}

impl Drop for PgWire {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies both directions; parses the client's.
async fn relay(client: TcpStream, server: TcpStream, log: Arc<Mutex<Vec<PgMessage>>>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
    let mut parser = Parser::default();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if server_write.write_all(&chunk[..n]).await.is_err() {
            return;
        }
        let messages = parser.feed(&chunk[..n]);
        log.lock()
            .expect("the log lock is never poisoned")
            .extend(messages);
    }
}

/// The client half of one connection: startup message first (no type byte; the URL
/// says `sslmode=disable`, so no SSL request), then typed messages.
#[derive(Default)]
struct Parser {
    buffer: Vec<u8>,
    started: bool,
    /// Prepared statement name → SQL.
    statements: HashMap<String, String>,
    /// Portal name → SQL of its statement.
    portals: HashMap<String, String>,
    /// Extended-protocol messages since the last `Sync`.
    pending: bool,
}

/// The NUL-terminated string at the start of `bytes`, and what follows it.
fn cstring(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    let rest = bytes.get(end + 1..).unwrap_or_default();
    (String::from_utf8_lossy(&bytes[..end]).into_owned(), rest)
}

impl Parser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<PgMessage> {
        self.buffer.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            let header = if self.started { 5 } else { 4 };
            if self.buffer.len() < header {
                return out;
            }
            let at = header - 4;
            let length = u32::from_be_bytes(
                self.buffer[at..at + 4]
                    .try_into()
                    .expect("a four-byte slice"),
            ) as usize;
            let total = at + length;
            if self.buffer.len() < total {
                return out;
            }
            let message: Vec<u8> = self.buffer.drain(..total).collect();
            if !self.started {
                self.started = true;
                continue;
            }
            out.extend(self.message(message[0], &message[5..]));
        }
    }

    fn message(&mut self, kind: u8, body: &[u8]) -> Option<PgMessage> {
        match kind {
            b'Q' => Some(PgMessage::Query(cstring(body).0)),
            b'P' => {
                let (name, rest) = cstring(body);
                self.statements.insert(name, cstring(rest).0);
                self.pending = true;
                None
            }
            b'B' => {
                let (portal, rest) = cstring(body);
                let sql = self.statements.get(&cstring(rest).0).cloned();
                self.portals.insert(portal, sql.unwrap_or_default());
                self.pending = true;
                None
            }
            b'E' => {
                self.pending = true;
                let sql = self.portals.get(&cstring(body).0).cloned();
                Some(PgMessage::Execute(sql.unwrap_or_default()))
            }
            b'S' => Some(if std::mem::take(&mut self.pending) {
                PgMessage::Sync
            } else {
                PgMessage::Ping
            }),
            b'D' | b'C' | b'H' => {
                self.pending = true;
                None
            }
            _ => None,
        }
    }
}

/// What a stretch of [`PgWire`]'s log cost Postgres.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PgCost {
    /// `BEGIN`s.
    pub transactions: usize,
    /// Statements of the application, in order (transaction control apart), whitespace
    /// folded, at most 60 characters each.
    pub statements: Vec<String>,
    /// Statements inside a transaction (between BEGIN and COMMIT/ROLLBACK).
    pub in_transaction: usize,
    /// Round trips: simple queries plus `Sync`s, pings included; the live feed's
    /// heartbeat ([`seatlock::live::HEARTBEAT_QUERY`], sent after a second without news)
    /// left out, as not the operation's.
    pub round_trips: usize,
    /// Connection checks.
    pub pings: usize,
}

impl PgCost {
    /// Sorts `messages` (from [`PgWire::since`]).
    pub fn of(messages: &[PgMessage]) -> PgCost {
        let mut cost = PgCost::default();
        let mut in_transaction = false;
        for message in messages {
            let sql = match message {
                PgMessage::Ping => {
                    cost.pings += 1;
                    cost.round_trips += 1;
                    continue;
                }
                PgMessage::Sync => {
                    cost.round_trips += 1;
                    continue;
                }
                PgMessage::Query(sql) if sql == seatlock::live::HEARTBEAT_QUERY => continue,
                PgMessage::Query(sql) => {
                    cost.round_trips += 1;
                    sql
                }
                PgMessage::Execute(sql) => sql,
            };
            let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
            let upper = flat.to_uppercase();
            if upper.starts_with("BEGIN") {
                cost.transactions += 1;
                in_transaction = true;
            } else if upper.starts_with("COMMIT") || upper.starts_with("ROLLBACK") {
                in_transaction = false;
            } else {
                cost.in_transaction += usize::from(in_transaction);
                cost.statements.push(flat.chars().take(60).collect());
            }
        }
        cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One typed message: type byte, length (itself included), body.
    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn parses_a_prepared_execution_a_simple_query_and_a_ping_split_anywhere() {
        let startup = {
            let body = b"\0\x03\0\0user\0postgres\0\0";
            let mut out = (body.len() as u32 + 4).to_be_bytes().to_vec();
            out.extend_from_slice(body);
            out
        };
        let wire = [
            startup,
            typed(b'P', b"s1\0SELECT 1\0\0\0"),
            typed(b'B', b"\0s1\0\0\0\0\0\0\0"),
            typed(b'E', b"\0\0\0\0\0"),
            typed(b'S', b""),
            typed(b'Q', b"BEGIN\0"),
            typed(b'S', b""),
        ]
        .concat();
        let mut parser = Parser::default();
        let mut messages = Vec::new();
        for chunk in wire.chunks(7) {
            messages.extend(parser.feed(chunk));
        }
        assert_eq!(
            messages,
            [
                PgMessage::Execute("SELECT 1".into()),
                PgMessage::Sync,
                PgMessage::Query("BEGIN".into()),
                PgMessage::Ping,
            ]
        );
        let cost = PgCost::of(&messages);
        assert_eq!((cost.round_trips, cost.pings, cost.transactions), (3, 1, 1));
        assert_eq!(cost.statements, ["SELECT 1"]);
    }
}
