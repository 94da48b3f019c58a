//! A readiness probe's statement against PostgreSQL that answers within
//! [`DEPENDENCY_TIMEOUT`] and, when it cannot, names why.
//!
//! A pool that cannot open a connection does not say why: sqlx retries the refusals it
//! takes for passing ("sorry, too many clients already", "the database system is starting
//! up") until its acquire timeout, and a probe that gives up first only knows that nothing
//! answered. So when the statement has not answered by [`LOOK_AFTER`], one connection of
//! its own is opened beside the pool, and what PostgreSQL says to it (its refusal, or
//! nothing) is what the probe reports.

use std::future::Future;
use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};

use crate::server::DEPENDENCY_TIMEOUT;

/// How long the statement may go unanswered before a connection of its own is tried:
/// enough for a healthy server under load, and early enough that the try can answer
/// before [`DEPENDENCY_TIMEOUT`].
const LOOK_AFTER: Duration = Duration::from_millis(800);

/// Runs `statement` (on `pool`) within [`DEPENDENCY_TIMEOUT`]. `Ok` holds its outcome,
/// even an error PostgreSQL answered with; `Err` says why there was no answer (the
/// pool's timeout counts as none).
pub async fn answer_within<T>(
    pool: &PgPool,
    statement: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<Result<T, sqlx::Error>, String> {
    let deadline = tokio::time::sleep(DEPENDENCY_TIMEOUT);
    tokio::pin!(deadline, statement);
    tokio::select! {
        answered = &mut statement => return settled(pool, answered).await,
        () = tokio::time::sleep(LOOK_AFTER) => {}
    }
    let look = look_for_cause(pool);
    tokio::pin!(look);
    let mut cause = None;
    loop {
        tokio::select! {
            answered = &mut statement => return settled(pool, answered).await,
            found = &mut look, if cause.is_none() => cause = Some(found),
            () = &mut deadline => break,
        }
    }
    Err(no_answer(pool, cause))
}

/// Why `pool` gave no connection (its error says only that it timed out): what PostgreSQL
/// told a connection opened beside it, or that it let that one in (the pool is the
/// bottleneck), or that it did not answer that one either within [`LOOK_AFTER`].
pub async fn why_no_connection(pool: &PgPool) -> String {
    match tokio::time::timeout(LOOK_AFTER, look_for_cause(pool)).await {
        Ok(Err(refusal)) => format!("a new connection was refused: {refusal}"),
        Ok(Ok(())) => format!(
            "PostgreSQL accepts new connections; the pool's {} connection(s) are busy ({} idle)",
            pool.size(),
            pool.num_idle()
        ),
        Err(_) => format!("PostgreSQL did not answer a new connection within {LOOK_AFTER:?}"),
    }
}

/// A statement's outcome; the pool's own timeout is no answer, and its cause is looked for.
async fn settled<T>(pool: &PgPool, answered: Result<T, sqlx::Error>) -> Result<Result<T, sqlx::Error>, String> {
    match answered {
        Err(sqlx::Error::PoolTimedOut) => {
            let cause = tokio::time::timeout(LOOK_AFTER, look_for_cause(pool)).await.ok();
            Err(no_answer(pool, cause))
        }
        answered => Ok(answered),
    }
}

/// What a connection of its own, opened beside the pool, met: `Err` with PostgreSQL's
/// refusal, or `Ok` once the server let it in (the server is fine, the pool is not).
async fn look_for_cause(pool: &PgPool) -> Result<(), sqlx::Error> {
    let connection = PgConnection::connect_with(&pool.connect_options()).await?;
    connection.close().await
}

fn no_answer(pool: &PgPool, cause: Option<Result<(), sqlx::Error>>) -> String {
    let waited = format!("PostgreSQL did not answer within {DEPENDENCY_TIMEOUT:?}");
    match cause {
        Some(Err(refusal)) => format!("{waited}: a new connection was refused: {refusal}"),
        Some(Ok(())) => format!(
            "{waited}, though it accepts new connections: the pool's {} connection(s) are busy ({} idle) or its \
             statements are held (a lock, a slow server)",
            pool.size(),
            pool.num_idle()
        ),
        None => format!("{waited}, nor did a new connection within {:?}", DEPENDENCY_TIMEOUT - LOOK_AFTER),
    }
}
