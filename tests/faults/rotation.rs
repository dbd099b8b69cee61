//! The signing secret rotated mid-sale, two servers restarted one by one, twice: first
//! each accepts the new secret while still signing with the old one, then each signs with
//! the new one and accepts the old one (docs/configuration.md, "Rotating the secret").
//! Buyers go back and forth between the servers throughout, and every one of them keeps
//! who they are: their holds, their orders, their open forms and their place in the
//! waiting room. Then the overlap ends (the old secret dropped), and still nobody is a
//! stranger: every cookie and ticket seen during it was signed again with the new one.

use seatlock_harness::{HttpBuyer, ServerProcess};

use crate::deployment::*;
use crate::waiting_room::{Visit, queue_up, visit, with_room};

/// The secret the deployment rotates to.
const NEW_SECRET: &str = "seatlock-the-rotated-test-secret-of-32-bytes-or-more";

/// A server of the deployment that signs with `secret` and also accepts `accepted` (the
/// environment an operator sets). Holds last a minute: the whole sale.
async fn server(d: &Deployment, secret: &str, accepted: &str) -> ServerProcess {
    let secret = secret.to_owned();
    let env = [("SEATLOCK_ACCEPTED_SECRETS", accepted)];
    let settings = move |s: &mut seatlock::config::Settings| {
        s.secret = Some(secret);
        s.hold_ttl_ms = 60_000;
    };
    d.server_with_env(settings, &env).await
}

/// Replaces `server` with [`server`]`(secret, accepted)`.
async fn restart(d: &Deployment, server: &mut ServerProcess, secret: &str, accepted: &str) {
    server.kill().await.unwrap();
    *server = self::server(d, secret, accepted).await;
}

/// The buyers of the sale and what each must keep.
struct Sale {
    /// Admitted: holds `seats[0]` and `seats[2]`, bought `seats[1]` (order `order`).
    shopper: HttpBuyer,
    order: i64,
    /// A tab of the shopper with the map's form as it was served before the rotation.
    open_form: HttpBuyer,
    /// Waiting at places 1 and 2.
    waiting: Vec<HttpBuyer>,
}

/// Every buyer of `sale` is who they were, asked through `server`: the shopper shops and
/// sees their hold and their order, the waiting keep their places.
async fn everyone_kept(d: &Deployment, sale: &mut Sale, server: &str, when: &str) {
    assert_eq!(
        visit(&mut sale.shopper, d, server).await,
        Visit::Map,
        "{when}"
    );
    let map = sale.shopper.get(&d.page(server)).await.unwrap();
    assert!(
        map.body.contains("held for you"),
        "{when}: the shopper's hold"
    );
    let order = format!("{server}/orders/{}", sale.order);
    let order = sale.shopper.get(&order).await.unwrap();
    assert_eq!(
        order.status,
        reqwest::StatusCode::OK,
        "{when}: {}",
        order.body
    );
    for (i, buyer) in sale.waiting.iter_mut().enumerate() {
        let place = Visit::Queued(i as u64 + 1);
        assert_eq!(visit(buyer, d, server).await, place, "{when}: waiting {i}");
    }
}

#[tokio::test]
async fn a_secret_rotated_across_two_servers_restarted_one_by_one_keeps_every_buyer() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let old = d.settings.secret.clone().expect("the test secret");
    let mut a = server(&d, &old, "").await;
    let mut b = server(&d, &old, "").await;
    let [s0, s1, s2] = [d.seats[0], d.seats[1], d.seats[2]];

    // Before: one buyer shops (two holds, one seat bought), two wait.
    let at = a.address.clone();
    let mut buyers = queue_up(&d, 3, |_| at.clone()).await;
    let waiting = buyers.split_off(1);
    let shopper = buyers.pop().unwrap();
    for seat in [s0, s1, s2] {
        assert_eq!(act(&shopper, &at, &d, seat, "hold").await.status, SEE_OTHER);
    }
    let bought = act(&shopper, &at, &d, s1, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    let order = d.orders(s1).await[0].id;
    let open_form = shopper.another_tab(Default::default());
    let mut sale = Sale {
        shopper,
        order,
        open_form,
        waiting,
    };
    everyone_kept(&d, &mut sale, &b.address, "before").await;

    // Round 1: each server accepts the new secret, still signing with the old one.
    restart(&d, &mut a, &old, NEW_SECRET).await;
    everyone_kept(&d, &mut sale, &a.address, "a accepts the new secret").await;
    restart(&d, &mut b, &old, NEW_SECRET).await;
    everyone_kept(&d, &mut sale, &b.address, "both accept it").await;

    // Round 2: each signs with the new secret and accepts the old one. Between the two
    // restarts the servers sign with different secrets, and buyers alternate.
    restart(&d, &mut a, NEW_SECRET, &old).await;
    everyone_kept(&d, &mut sale, &a.address, "a signs with the new secret").await;
    everyone_kept(&d, &mut sale, &b.address, "b still signs with the old").await;
    everyone_kept(&d, &mut sale, &a.address, "back on a").await;
    restart(&d, &mut b, NEW_SECRET, &old).await;
    everyone_kept(&d, &mut sale, &b.address, "both sign with the new secret").await;

    // A form served before the rotation still posts: the shopper buys a held seat with it.
    let bought = act(&sale.open_form, &b.address, &d, s0, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "the open form: {}", bought.body);
    d.assert_sold_once_to(s0, &d.orders(s1).await[0].buyer_id)
        .await;

    // The overlap ends: the old secret is dropped. Everyone was seen during it.
    restart(&d, &mut a, NEW_SECRET, "").await;
    everyone_kept(&d, &mut sale, &a.address, "the old secret dropped").await;
    let bought = act(&sale.shopper, &a.address, &d, s2, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "the last hold: {}", bought.body);
    d.assert_invariant().await;
}
