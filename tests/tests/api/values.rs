//! `lectern_read_model::values::instant` reads a `timestamptz` from its binary form instead of through
//! sqlx's `DateTime<Utc>` decoder: it must agree with that decoder on every instant a
//! record can carry, and fail, not panic, on what chrono cannot hold.

use chrono::{DateTime, Utc};
use lectern_read_model::values::instant;
use lectern_tests::database::admin_url;
use sqlx::{Connection, PgConnection, Row};

/// Microseconds from the Unix epoch, spread over years 0001 to 9999 by a fixed
/// xorshift sequence, plus the edges that arithmetic from 2000-01-01 gets wrong first.
fn unix_micros() -> Vec<i64> {
    const FIRST: i64 = -62_135_596_800_000_000; // 0001-01-01T00:00:00Z
    const LAST: i64 = 253_402_300_799_999_999; // 9999-12-31T23:59:59.999999Z
    let mut edges = vec![FIRST, LAST, -1, 0, 1, 946_684_800_000_000 - 1, 946_684_800_000_000, 951_782_400_000_000];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    edges.extend((0..20_000).map(|_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let span = u64::try_from(LAST - FIRST).expect("positive span");
        FIRST + i64::try_from(state % span).expect("below the span")
    }));
    edges
}

#[tokio::test]
async fn instants_read_from_binary_equal_sqlx_decoding_from_year_1_to_9999() {
    let mut connection = PgConnection::connect(&admin_url()).await.expect("connect");
    let micros = unix_micros();
    // A prepared statement, so the values arrive in binary as a page's do.
    let rows = sqlx::query("select timestamptz 'epoch' + m * interval '1 microsecond' from unnest($1::int8[]) as m")
        .bind(&micros)
        .fetch_all(&mut connection)
        .await
        .expect("the instants");
    assert_eq!(rows.len(), micros.len());
    for row in &rows {
        let expected: DateTime<Utc> = row.try_get(0).expect("sqlx decodes it");
        let read = instant(row, 0).expect("instant reads it");
        assert_eq!(read.as_datetime(), expected);
    }
}

#[tokio::test]
async fn infinite_instants_are_a_decode_error_naming_the_column() {
    let mut connection = PgConnection::connect(&admin_url()).await.expect("connect");
    let row = sqlx::query("select 'infinity'::timestamptz, '-infinity'::timestamptz, $1::int4")
        .bind(1)
        .fetch_one(&mut connection)
        .await
        .expect("the row");
    for index in [0, 1] {
        match instant(&row, index) {
            Err(sqlx::Error::ColumnDecode { index: named, .. }) => assert_eq!(named, index.to_string()),
            other => panic!("column {index}: {other:?}"),
        }
    }
}
