//! Run with (a private Redis from the project's script, then the example):
//! `scripts/services.sh up && source .run/env && cargo run -p lease --example hold_and_fence`
//! (or with `REDIS_URL=redis://HOST:PORT/` naming any Redis you may write to).
//!
//! One lease from grant to release, and why writes carry a fencing token:
//!
//! 1. Alice acquires the lease on `seat-14C` and writes to the resource with her token.
//! 2. Bob tries the same lease and is refused (`LeaseError::Held`).
//! 3. Alice pauses past her TTL (a GC pause, a swapped-out VM); the lease expires and
//!    Bob gets it, with a larger fencing token, and writes.
//! 4. Alice wakes up still believing she holds the lease. The resource refuses her write
//!    (its token is lower than the highest it accepted), and her release, a
//!    compare-and-delete, deletes nothing: the lease is Bob's.
//! 5. Bob releases.
//!
//! The fence ledger is `lease::MemoryLedger`, which is not durable: fine here, never in
//! production (see the crate docs, step 5).

use std::time::Duration;

use lease::{FencingToken, LeaseClient, LeaseError, LeaseKey, LeaseStore, MemoryLedger};

/// The protected resource, in process: it keeps the highest fencing token it accepted
/// and refuses any write carrying a lower one (a database does the same with
/// `UPDATE … WHERE fence_token <= $1`).
struct Resource {
    highest: FencingToken,
    value: String,
}

impl Resource {
    /// Writes `value` if `token` is not lower than the highest accepted; otherwise
    /// returns that highest token and changes nothing.
    fn write(&mut self, token: FencingToken, value: &str) -> Result<(), FencingToken> {
        if token < self.highest {
            return Err(self.highest);
        }
        self.highest = token;
        self.value = value.to_owned();
        Ok(())
    }

    fn report(&mut self, who: &str, token: FencingToken, value: &str) {
        match self.write(token, value) {
            Ok(()) => println!("resource: accepted {who}'s write {value:?} (token {token})"),
            Err(highest) => println!(
                "resource: refused {who}'s write {value:?}: token {token} is lower than {highest}, the highest accepted"
            ),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!(
            "REDIS_URL is not set: run `scripts/services.sh up && source .run/env` first \
             (or set REDIS_URL=redis://HOST:PORT/)"
        );
        std::process::exit(2);
    };
    let redis = lease::connect(&url, Duration::from_secs(2))?;
    let client = LeaseClient::new(redis, MemoryLedger::new());
    // A fresh group per run, so runs do not share fencing tokens.
    let key = LeaseKey::new(format!("example:{:08x}", rand::random::<u32>()), "seat-14C")?;
    println!("lease {key:?}");
    let mut resource = Resource {
        highest: FencingToken(0),
        value: String::new(),
    };

    let ttl = Duration::from_millis(300);
    let alice = client.acquire(&key, "alice", ttl).await?;
    println!(
        "alice: granted, fencing token {}, TTL {:?}, expires at {} (Unix ms, Redis clock)",
        alice.fencing_token(),
        alice.ttl(),
        alice.expires_at_ms()
    );
    resource.report("alice", alice.fencing_token(), "seat 14C: alice");

    match client.acquire(&key, "bob", Duration::from_secs(5)).await {
        Err(LeaseError::Held { holder, remaining }) => {
            println!("bob: refused, held by {holder:?} for another {remaining:?}")
        }
        Ok(_) => unreachable!("alice holds the lease"),
        Err(other) => return Err(other.into()),
    }

    println!("alice: pauses for 400ms, past her TTL");
    tokio::time::sleep(Duration::from_millis(400)).await;

    let bob = client.acquire(&key, "bob", Duration::from_secs(5)).await?;
    println!(
        "bob: granted, fencing token {} (alice's was {})",
        bob.fencing_token(),
        alice.fencing_token()
    );
    resource.report("bob", bob.fencing_token(), "seat 14C: bob");

    println!("alice: wakes up and writes, still believing she holds the lease");
    resource.report("alice", alice.fencing_token(), "seat 14C: alice again");
    let deleted = client.release(&alice).await?;
    println!("alice: release (compare-and-delete) deleted the lease: {deleted}");

    let deleted = client.release(&bob).await?;
    println!("bob: release (compare-and-delete) deleted the lease: {deleted}");
    println!("resource holds {:?}", resource.value);
    Ok(())
}
