//! Requests hyper refuses before the application sees them (a head past the
//! connection layer's buffer, a malformed request line or header) still get the
//! contract's error shape and a request id, not a bare status line.

use super::{request, Served, HEADER_TIMEOUT_MS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_64_kib_is_a_431_in_the_error_shape_with_a_request_id() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;
    let huge = request("/v1/contacts", &served.key, &[format!("X-Padding: {}", "a".repeat(70 * 1024))]);

    let outcome = served.exchange(&huge).await;

    assert_eq!(outcome.status(), Some(431), "a 70 KiB head: {outcome:?}");
    assert_in_error_shape(&outcome, "REQUEST_FAILED");
    served.assert_serves_a_normal_client("after a 70 KiB head").await;
    served.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_header_line_is_a_400_in_the_error_shape_with_a_request_id() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;

    let outcome = served.exchange(b"GET /v1/contacts HTTP/1.1\r\nHost: lectern.test\r\nNo colon here\r\n\r\n").await;

    assert_eq!(outcome.status(), Some(400), "a header line without a colon: {outcome:?}");
    assert_in_error_shape(&outcome, "VALIDATION_ERROR");
    served.assert_no_panic();
}

fn assert_in_error_shape(outcome: &super::Outcome, code: &str) {
    let super::Outcome::Answered { text, .. } = outcome else { panic!("no answer: {outcome:?}") };
    let head = text.split_once("\r\n\r\n").map(|(head, _)| head.to_ascii_lowercase()).unwrap_or_default();
    let body = outcome.body();
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|message| !message.is_empty()), "{body}");
    let request_id = body["requestId"].as_str().unwrap_or_else(|| panic!("no requestId: {body}"));
    assert!(head.contains(&format!("x-request-id: {request_id}")), "the header must carry the body's id: {head}");
    assert!(head.contains("content-type: application/json"), "{head}");
}
