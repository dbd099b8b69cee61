//! The lab's tables have their own migrations (`lab/migrations/`), beside the product's
//! in one `_sqlx_migrations` table. A database the product migrated gets the lab's tables
//! from `seatlock-lab migrate`, and either migrator runs again over the other's rows.

use seatlock_harness::{store_urls, unique_name};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

/// The race lab's tables.
const LAB_TABLES: [&str; 4] = ["race_lab_sales", "lab_runs", "lab_seats", "lab_rows"];

/// Which of [`LAB_TABLES`] the database has.
async fn lab_tables(db: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
          WHERE table_schema = 'public' AND table_name = ANY($1) ORDER BY table_name",
    )
    .bind(LAB_TABLES)
    .fetch_all(db)
    .await
    .unwrap()
}

/// An empty database of its own (the harness's fresh ones are migrated already), and
/// the admin connection that drops it ([`drop_database`]).
async fn empty_database() -> (PgPool, PgConnection, String) {
    let (admin_url, _) = store_urls().unwrap();
    let name = unique_name("m");
    let mut admin = PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let (server, _) = admin_url.rsplit_once('/').unwrap();
    let db = PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{server}/{name}"))
        .await
        .unwrap();
    (db, admin, name)
}

async fn drop_database(db: PgPool, mut admin: PgConnection, name: &str) {
    db.close().await;
    sqlx::query(&format!("DROP DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_product_migrates_without_the_lab_tables_and_the_lab_adds_them() {
    let (db, admin, name) = empty_database().await;

    // The product's migrations end without the lab's tables (0015 drops them).
    seatlock::MIGRATOR.run(&db).await.unwrap();
    assert!(lab_tables(&db).await.is_empty());

    // The lab's migrate adds them, after the product's.
    seatlock_lab::migrate(&db).await.unwrap();
    let mut all: Vec<String> = LAB_TABLES.map(str::to_owned).into();
    all.sort();
    assert_eq!(lab_tables(&db).await, all);

    // Each migrator runs again over the other's rows, and changes nothing.
    seatlock::MIGRATOR.run(&db).await.unwrap();
    seatlock_lab::migrate(&db).await.unwrap();
    assert_eq!(lab_tables(&db).await, all);
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&db)
            .await
            .unwrap();
    let expected: Vec<i64> = seatlock::MIGRATOR
        .iter()
        .chain(seatlock_lab::MIGRATOR.iter())
        .map(|m| m.version)
        .collect();
    assert_eq!(versions, expected);
    drop_database(db, admin, &name).await;
}

/// A database migrated before the lab left the product (through 0014, the lab's tables
/// made by 0005 and 0011) upgrades with `seatlock-lab migrate`: 0015 drops those tables
/// first, then the lab's own migrations make them again.
#[tokio::test]
async fn a_database_from_before_the_move_gets_the_labs_tables_from_the_lab() {
    let (db, admin, name) = empty_database().await;
    let before_the_move = sqlx::migrate::Migrator {
        migrations: seatlock::MIGRATOR
            .iter()
            .filter(|m| m.version <= 14)
            .cloned()
            .collect::<Vec<_>>()
            .into(),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    before_the_move.run(&db).await.unwrap();
    let mut all: Vec<String> = LAB_TABLES.map(str::to_owned).into();
    all.sort();
    assert_eq!(lab_tables(&db).await, all, "0005 and 0011 made them");

    seatlock_lab::migrate(&db).await.unwrap();
    assert_eq!(lab_tables(&db).await, all);
    let lab_versions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE version > 100000")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(lab_versions, seatlock_lab::MIGRATOR.iter().count() as i64);
    drop_database(db, admin, &name).await;
}
