//! Rotating the cursor secret with an overlap (`LECTERN_PREVIOUS_CURSOR_SECRETS`): cursors
//! and sync tokens signed with a secret still listed keep working, every new one is signed
//! with the current secret, and one signed with a secret retired altogether is refused
//! with a message saying it may have been.

use lectern_tests::app::{urlencode, AppOptions, TestApp};
use lectern_tests::seed::insert_contacts;
use lectern_tests::{Reply, TestDatabase};

const BEFORE: &str = "the cursor secret before the rotation: at least 32 bytes";
const AFTER: &str = "the cursor secret after the rotation: at least 32 bytes long";

async fn signed_with(db: &TestDatabase, current: &str, previous: &[&str]) -> TestApp {
    let options = AppOptions {
        cursor_secret: current.to_owned(),
        previous_cursor_secrets: previous.iter().map(|secret| (*secret).to_owned()).collect(),
        ..AppOptions::default()
    };
    TestApp::spawn_with(db.pool.clone(), options).await
}

fn field(reply: &Reply, pointer: &str) -> String {
    reply
        .body
        .pointer(pointer)
        .and_then(|value| value.as_str())
        .unwrap_or_else(|| panic!("no {pointer}: {}", reply.text))
        .to_owned()
}

/// A 400 naming `parameter`, whose detail says the value may be signed with a retired secret.
fn assert_refused_as_retired(reply: &Reply, parameter: &str) {
    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    assert!(
        details.iter().any(|detail| detail.starts_with(parameter) && detail.contains("retired")),
        "{parameter} refused without saying it may be signed with a retired secret: {details:?}"
    );
}

#[tokio::test]
async fn cursors_and_tokens_of_a_listed_previous_secret_keep_working_and_new_ones_use_the_current_secret() {
    let db = TestDatabase::create().await;
    let before = signed_with(&db, BEFORE, &[]).await;
    let (workspace, key) = before.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Rotated", 6).await;
    before.heard_every_commit().await;
    let listing = before.get(&key, "/v1/contacts?limit=100").await;
    let feed = before.get(&key, "/v1/contacts/changes?limit=100").await;
    let first_page = before.get(&key, "/v1/contacts?limit=2").await;
    let first_changes = before.get(&key, "/v1/contacts/changes?limit=2").await;
    let (old_cursor, old_token) = (field(&first_page, "/page/nextCursor"), field(&first_changes, "/syncToken"));

    // During the rotation: the old secret listed as previous.
    let during = signed_with(&db, AFTER, &[BEFORE]).await;
    let second_page = during.get(&key, &format!("/v1/contacts?limit=2&cursor={}", urlencode(&old_cursor))).await;
    second_page.assert_ok();
    assert_eq!(second_page.ids(), listing.ids()[2..4], "the old cursor's page is not the listing's next");
    let second_changes =
        during.get(&key, &format!("/v1/contacts/changes?limit=2&since={}", urlencode(&old_token))).await;
    second_changes.assert_ok();
    assert_eq!(second_changes.ids(), feed.ids()[2..4], "the old token's page is not the feed's next");
    let (new_cursor, new_token) = (field(&second_page, "/page/nextCursor"), field(&second_changes, "/syncToken"));

    // New ones are signed with the current secret: they open where only it is known,
    // and not where only the old one is.
    let after = signed_with(&db, AFTER, &[]).await;
    after.get(&key, &format!("/v1/contacts?limit=2&cursor={}", urlencode(&new_cursor))).await.assert_ok();
    after.get(&key, &format!("/v1/contacts/changes?limit=2&since={}", urlencode(&new_token))).await.assert_ok();
    let unknown = before.get(&key, &format!("/v1/contacts?limit=2&cursor={}", urlencode(&new_cursor))).await;
    assert_refused_as_retired(&unknown, "cursor");

    // The old secret retired altogether: its cursors and tokens are refused, saying why.
    let retired = after.get(&key, &format!("/v1/contacts?limit=2&cursor={}", urlencode(&old_cursor))).await;
    assert_refused_as_retired(&retired, "cursor");
    let retired = after.get(&key, &format!("/v1/contacts/changes?limit=2&since={}", urlencode(&old_token))).await;
    assert_refused_as_retired(&retired, "since");
}

/// The rule, for a fleet mid-rotation as the operations guide runs it (found by the
/// nemesis, which rotated the secret with two API processes restarted one by one): at every
/// point of both rolling restarts, a token and a cursor handed out by either process are
/// taken by the other. Step 1 adds the new secret as accepted everywhere, step 2 makes it
/// the signing one; midway through step 2 one process signs with the new secret while the
/// other still signs with the old.
#[tokio::test]
async fn midway_through_each_step_of_a_rotation_each_process_takes_what_the_other_signs() {
    let db = TestDatabase::create().await;
    let not_yet_restarted = signed_with(&db, BEFORE, &[]).await;
    let (workspace, key) = not_yet_restarted.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Fleet", 6).await;
    not_yet_restarted.heard_every_commit().await;
    let step_one_done = signed_with(&db, BEFORE, &[AFTER]).await;
    let step_two_done = signed_with(&db, AFTER, &[BEFORE]).await;

    for (first, second, midway) in
        [(&step_one_done, &not_yet_restarted, "step 1"), (&step_two_done, &step_one_done, "step 2")]
    {
        for (from, to) in [(first, second), (second, first)] {
            let changes = from.get(&key, "/v1/contacts/changes?limit=2").await;
            let page = from.get(&key, "/v1/contacts?limit=2").await;
            let token = field(&changes, "/syncToken");
            let cursor = field(&page, "/page/nextCursor");
            let followed = to.get(&key, &format!("/v1/contacts/changes?limit=2&since={}", urlencode(&token))).await;
            assert_eq!(followed.status, 200, "midway through {midway}, a token was refused: {}", followed.text);
            let next = to.get(&key, &format!("/v1/contacts?limit=2&cursor={}", urlencode(&cursor))).await;
            assert_eq!(next.status, 200, "midway through {midway}, a cursor was refused: {}", next.text);
        }
    }
    // What step 1 is for: without it, midway through the swap the process not yet restarted
    // refuses what the restarted one signs.
    let token = field(&step_two_done.get(&key, "/v1/contacts/changes?limit=2").await, "/syncToken");
    let refused =
        not_yet_restarted.get(&key, &format!("/v1/contacts/changes?limit=2&since={}", urlencode(&token))).await;
    assert_refused_as_retired(&refused, "since");
}
