//! A Redis that is not ours alone: other applications' `notify-keyspace-events` flags,
//! a managed Redis that refuses `CONFIG`, an eviction policy that can drop keys with a
//! TTL. The server adds what it needs to what is there, keeps working where it cannot,
//! and says so in `/healthz`.

use std::time::Duration;

use reqwest::StatusCode;
use seatlock_harness::RedisServer;

use crate::connections::scene;

async fn notify_flags(redis: &RedisServer) -> String {
    let mut conn = lease::connect(&redis.url(), Duration::from_secs(2))
        .unwrap()
        .connection();
    let (_, flags): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(&mut conn)
        .await
        .unwrap();
    flags
}

#[tokio::test]
async fn other_applications_notification_flags_are_kept_and_ours_added() {
    let redis = RedisServer::start_with(&["--notify-keyspace-events", "Kg"])
        .await
        .unwrap();
    let (app, mut buyer, _, _) = scene(redis.url(), 2_000).await;
    let flags = notify_flags(&redis).await;
    for flag in ['K', 'g', 'E', 'x'] {
        assert!(flags.contains(flag), "{flag} in {flags:?}");
    }
    let health = buyer
        .get(&format!("{}/healthz", app.address))
        .await
        .unwrap();
    assert_eq!(
        (health.status, health.body.as_str()),
        (StatusCode::OK, "ok")
    );
}

/// Another application changes the flags later, dropping ours (`CONFIG SET
/// notify-keyspace-events Kg`): the server notices within seconds and adds them back, so
/// lapsed holds keep showing on live pages. (Before, the flags were checked only when the
/// feed connected: the lapse of a hold never reached open pages again.)
#[tokio::test]
async fn flags_another_application_drops_later_are_added_back() {
    let redis = RedisServer::start().await.unwrap();
    let (_app, _buyer, _, _) = scene(redis.url(), 2_000).await;
    let mut other = lease::connect(&redis.url(), Duration::from_secs(2))
        .unwrap()
        .connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kg")
        .query_async(&mut other)
        .await
        .unwrap();
    seatlock_harness::eventually(Duration::from_secs(15), "our flags back", || async {
        let flags = notify_flags(&redis).await;
        ['K', 'g', 'E', 'x'].iter().all(|f| flags.contains(*f))
    })
    .await;
}

#[tokio::test]
async fn a_redis_that_refuses_config_still_serves_holds_and_healthz_says_what_is_off() {
    let redis = RedisServer::start_with(&["--rename-command", "CONFIG", ""])
        .await
        .unwrap();
    let (app, mut buyer, event, seats) = scene(redis.url(), 2_000).await;
    let hold = buyer
        .seat_action(&app.address, event, seats[0], "hold")
        .await;
    assert_eq!(hold.unwrap().status, StatusCode::SEE_OTHER);
    let health = buyer
        .get(&format!("{}/healthz", app.address))
        .await
        .unwrap();
    assert_eq!(health.status, StatusCode::OK, "{}", health.body);
    assert!(health.body.starts_with("ok\n"), "{}", health.body);
    assert!(
        health.body.contains("warning: expiry notifications: off"),
        "{}",
        health.body
    );
    assert!(
        health.body.contains("warning: eviction: unknown"),
        "{}",
        health.body
    );
}

#[tokio::test]
async fn an_eviction_policy_that_can_drop_holds_is_reported() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"])
        .await
        .unwrap();
    let (app, mut buyer, _, _) = scene(redis.url(), 2_000).await;
    let health = buyer
        .get(&format!("{}/healthz", app.address))
        .await
        .unwrap();
    assert_eq!(health.status, StatusCode::OK, "{}", health.body);
    assert!(
        health
            .body
            .contains("maxmemory-policy volatile-lru may evict holds"),
        "{}",
        health.body
    );
}
