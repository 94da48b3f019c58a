//! The contract's error shape, and the outermost layer that guarantees it: every
//! response (handler errors, poem's own 404/405/parse failures, panics) leaves with
//! `{error:{code,message,details?},requestId}` and an `X-Request-Id` header, and every
//! response is compressed for a client that accepts it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use poem::http::{header, HeaderValue, Method, StatusCode};
use poem::web::CompressionAlgo;
use poem::{Endpoint, IntoResponse, Request, Response};
use poem_openapi::Object;

use super::caller::{self, Caller};
use super::compression;
use super::long_poll::{DetachSlot, LongPoll, Passed, WaitSlot};
use super::request_id::RequestId;
use crate::error::{code_for_status, ApiError, ErrorCode, ErrorDetails};

/// The body of every error response.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorResponse {
    pub error: ErrorInfo,
    pub request_id: RequestId,
}

/// What went wrong.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorInfo {
    pub code: ErrorCode,
    #[oai(validator(min_length = 1))]
    pub message: String,
    /// For `VALIDATION_ERROR`: one entry per problem, each naming its parameter; or, when
    /// the feed cannot continue from `since`, an object saying to start over.
    #[oai(skip_serializing_if_is_none)]
    pub details: Option<ErrorDetails>,
}

impl ErrorResponse {
    /// The body for `error` in the request being served; logs the cause of 5xx errors.
    pub fn for_current_request(error: &ApiError) -> Self {
        if error.status().is_server_error() {
            // The request's id on the cause's line too, so it can be found from what the
            // client quotes.
            tracing::error!(request_id = %RequestId::current(), error = %crate::error::chain(error), "request failed");
        }
        Self {
            error: ErrorInfo { code: error.code(), message: error.public_message(), details: error.details() },
            request_id: RequestId::current(),
        }
    }

    fn from_status(status: StatusCode, message: String, details: Option<Vec<String>>) -> Self {
        Self {
            error: ErrorInfo { code: code_for_status(status), message, details: details.map(ErrorDetails::Problems) },
            request_id: RequestId::current(),
        }
    }

    /// The body for a response written outside any request (the connection layer's).
    pub(crate) fn with_id(status: StatusCode, message: String, request_id: RequestId) -> Self {
        Self { error: ErrorInfo { code: code_for_status(status), message, details: None }, request_id }
    }

    pub(crate) fn to_json(&self) -> String {
        poem_openapi::types::ToJSON::to_json_string(self)
    }
}

/// Declares an operation's error responses: an `ApiResponse` enum listing exactly the
/// statuses the operation documents, each with the error shape.
macro_rules! error_responses {
    ($(#[$meta:meta])* $name:ident { $($(#[$variant_meta:meta])* $variant:ident = $status:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, poem_openapi::ApiResponse)]
        pub enum $name {
            $(
                $(#[$variant_meta])*
                #[oai(status = $status)]
                $variant(poem_openapi::payload::Json<$crate::http::envelope::ErrorResponse>),
            )+
        }

        impl From<$crate::error::ApiError> for $name {
            fn from(error: $crate::error::ApiError) -> Self {
                let status = error.status().as_u16();
                let body = poem_openapi::payload::Json(
                    $crate::http::envelope::ErrorResponse::for_current_request(&error),
                );
                $( if status == $status { return Self::$variant(body); } )+
                // A status this operation does not document is a bug: answer 500.
                Self::InternalError(body)
            }
        }
    };
}
pub(crate) use error_responses;

/// Bytes a request line plus headers may take. The envelope refuses larger heads with
/// a 431 in the contract's error shape; the connection layer reads up to four times as
/// much before hyper must cut the request off, with a 431 of its own that
/// `server::parser_refusals` puts in the error shape too.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The challenge of every 401: an API key in the `X-API-Key` header.
pub const KEY_CHALLENGE: &str = "ApiKey realm=\"lectern\", header=\"X-API-Key\"";

/// Wraps the whole application: request id in, envelope and `X-Request-Id` out,
/// panics caught, compression negotiated, one log line per request. A request its feed
/// parks ([`long_poll`]) leaves the same way once its wait ends.
pub async fn envelope<E: Endpoint>(inner: Arc<E>, mut request: Request) -> poem::Result<Response> {
    let started = Instant::now();
    keep_undecodable_path_literal(&mut request);
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .and_then(RequestId::from_client)
        .unwrap_or_else(RequestId::generate);
    // Operations hand it to their feature as an argument.
    request.set_data(request_id.clone());
    let waits = WaitSlot::default();
    request.set_data(waits.clone());
    let detach = request.data::<Arc<DetachSlot>>().cloned();
    let head_only = request.method() == Method::HEAD;
    let leaving = Leaving {
        request_id: request_id.clone(),
        started,
        method: request.method().clone(),
        route: crate::http::operations::route_of(request.uri().path()),
        encoding: compression::chosen_for(&request),
    };

    let (passed, caller) = caller::scope(request_id.clone().scope(async {
        if head_size(&request) > MAX_HEAD_BYTES {
            return Ok(Ok(json_response(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                &ErrorResponse::from_status(
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    format!("The request line and headers take more than {MAX_HEAD_BYTES} bytes."),
                    None,
                ),
            )));
        }
        // Boxed, as everything this layer awaits: inline, the whole application's future
        // would be carried (and copied) by every layer outside it.
        AssertUnwindSafe(Box::pin(inner.call(request)))
            .catch_unwind()
            .await
            .map(|result| result.map(IntoResponse::into_response))
    }))
    .await;
    let finish = move |passed: Passed| leaving.finish(rendered(passed), &caller);
    let Some(parked) = waits.take() else {
        return Ok(request_id.sync_scope(|| finish(passed)));
    };
    drop(passed);
    let long_poll = LongPoll::new(parked, request_id, head_only, Box::new(finish));
    match detach {
        Some(slot) => {
            // Its connection's task answers it from now on, and drops this future.
            slot.hand_over(long_poll);
            std::future::pending().await
        }
        None => Ok(Box::pin(long_poll.answered()).await),
    }
}

/// The response of a pass through the application, in the contract's shape whatever it
/// ended with.
fn rendered(passed: Passed) -> Response {
    match passed {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => render_error(error),
        Err(_panic) => {
            tracing::error!(request_id = %RequestId::current(), "request handler panicked");
            json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ErrorResponse::from_status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "An unexpected error occurred; it has been logged.".to_owned(),
                    None,
                ),
            )
        }
    }
}

/// What a request's response leaves with, known when it arrived.
struct Leaving {
    request_id: RequestId,
    started: Instant,
    method: Method,
    route: &'static str,
    encoding: Option<CompressionAlgo>,
}

impl Leaving {
    /// `response` with the headers every response carries, compressed when the client
    /// accepts it; the request counted and logged.
    fn finish(self, mut response: Response, caller: &Caller) -> Response {
        let Self { request_id, started, method, route, encoding } = self;
        let headers = response.headers_mut();
        if let Ok(value) = HeaderValue::from_str(request_id.as_str()) {
            headers.insert("x-request-id", value);
        }
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            // RFC 9110: a 405 names the methods the resource supports; every route is read-only.
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        if status == StatusCode::UNAUTHORIZED {
            // RFC 9110: a 401 names the scheme that would succeed.
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(KEY_CHALLENGE));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE && !response.headers().contains_key(header::RETRY_AFTER) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        rate_limit_headers(response.headers_mut(), status, caller);
        // Keys belong on servers: browsers get no CORS grant, and nothing is cached or sniffed.
        headers_for_every_response(response.headers_mut());
        let response = compression::compressed(response, encoding);
        let elapsed = started.elapsed();
        crate::http::operations::record_request(route, method.as_str(), status.as_u16(), elapsed);
        tracing::info!(
            request_id = %request_id,
            method = %method,
            route,
            status = status.as_u16(),
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            key_id = caller.key_id.as_deref().unwrap_or("-"),
            "request"
        );
        response
    }
}

/// Bytes of the request line and headers, as sent. Measured from the URI's parts
/// rather than by rendering it: this runs on every request.
fn head_size(request: &Request) -> usize {
    let uri = request.original_uri();
    let target = uri.scheme_str().map_or(0, |scheme| scheme.len() + "://".len())
        + uri.authority().map_or(0, |authority| authority.as_str().len())
        + uri.path_and_query().map_or(1, |path_and_query| path_and_query.as_str().len());
    let line = request.method().as_str().len() + target + 12;
    request.headers().iter().fold(line, |size, (name, value)| size + name.as_str().len() + value.len() + 4)
}

/// A path whose percent-escapes do not decode to UTF-8 (`/v1/contacts/%FF`) would be
/// refused by the router before authentication, breaking the order of checks. Escaping
/// its `%` signs hands the handler the literal text instead, which then fails the id's
/// own check (400 naming `id`) after the key and scope checks.
fn keep_undecodable_path_literal(request: &mut Request) {
    let path = request.uri().path();
    if !path.contains('%') || percent_encoding::percent_decode_str(path).decode_utf8().is_ok() {
        return;
    }
    let escaped = path.replace('%', "%25");
    let path_and_query = match request.uri().query() {
        Some(query) => format!("{escaped}?{query}"),
        None => escaped,
    };
    let mut parts = request.uri().clone().into_parts();
    if let Ok(rebuilt) = path_and_query.parse() {
        parts.path_and_query = Some(rebuilt);
        if let Ok(uri) = poem::http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
}

/// Every authenticated response states the key's standing; a 429 says when to retry.
fn rate_limit_headers(headers: &mut poem::http::HeaderMap, status: StatusCode, caller: &Caller) {
    if let Some(standing) = &caller.standing {
        if let Ok(value) = HeaderValue::from_str(&standing.policy.header()) {
            headers.insert("ratelimit-policy", value);
        }
        if let Ok(value) = HeaderValue::from_str(&standing.header()) {
            headers.insert("ratelimit", value);
        }
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        let retry_after =
            caller.standing.and_then(|standing| standing.retry_after_secs).or(caller.lookup_retry_after_secs);
        headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after.unwrap_or(1)));
    }
}

fn headers_for_every_response(headers: &mut poem::http::HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}

/// Turns any error into the envelope, keeping its status. Errors that already carry a
/// rendered envelope (an operation's documented error responses) pass unchanged.
fn render_error(error: poem::Error) -> Response {
    if !error.has_source() {
        return error.into_response();
    }
    if let Some(api_error) = error.downcast_ref::<ApiError>() {
        return json_response(api_error.status(), &ErrorResponse::for_current_request(api_error));
    }
    if let Some((name, reason)) = parameter_problem(&error) {
        let api_error = ApiError::invalid(
            name,
            reason.trim_start_matches("failed to parse \"").split_once("\": ").map_or(reason, |(_, why)| why),
        );
        return json_response(api_error.status(), &ErrorResponse::for_current_request(&api_error));
    }
    let status = error.status();
    let body = if status == StatusCode::NOT_FOUND {
        ErrorResponse::from_status(
            status,
            "No such resource: check the path against /v1/openapi.json.".to_owned(),
            None,
        )
    } else if status == StatusCode::METHOD_NOT_ALLOWED {
        ErrorResponse::from_status(
            status,
            "This method is not allowed on this path; the API is read-only (GET).".to_owned(),
            None,
        )
    } else if status == StatusCode::UNAUTHORIZED {
        ErrorResponse::from_status(status, "Missing API key: send it in the X-API-Key header.".to_owned(), None)
    } else if status == StatusCode::BAD_REQUEST {
        let problem = error.to_string();
        ErrorResponse::from_status(status, format!("Invalid request: {problem}"), Some(vec![problem]))
    } else if status.is_server_error() {
        tracing::error!(request_id = %RequestId::current(), error = %error, "request failed");
        ErrorResponse::from_status(status, "An unexpected error occurred; it has been logged.".to_owned(), None)
    } else {
        ErrorResponse::from_status(status, format!("The request failed: {error}"), None)
    };
    json_response(status, &body)
}

/// poem-openapi's own parameter failures, as (parameter, reason).
fn parameter_problem(error: &poem::Error) -> Option<(&'static str, &str)> {
    use poem_openapi::error::{ParseParamError, ParsePathError};
    if let Some(problem) = error.downcast_ref::<ParsePathError>() {
        return Some((problem.name, problem.reason.as_str()));
    }
    error.downcast_ref::<ParseParamError>().map(|problem| (problem.name, problem.reason.as_str()))
}

fn json_response(status: StatusCode, body: &ErrorResponse) -> Response {
    let json = body.to_json();
    Response::builder().status(status).content_type("application/json; charset=utf-8").body(json)
}

#[cfg(test)]
mod tests {
    use poem::endpoint::make;
    use poem::http::StatusCode;
    use poem::{Request, Response};
    use std::sync::Arc;

    use super::envelope;

    async fn envelope_of(endpoint: impl poem::Endpoint + 'static, request: Request) -> (Response, serde_json::Value) {
        let response = envelope(Arc::new(endpoint), request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.into_bytes().await.unwrap();
        (Response::from_parts(parts, poem::Body::empty()), serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_panicking_handler_becomes_a_500_in_the_error_shape() {
        async fn boom(_: Request) -> &'static str {
            panic!("handler bug")
        }

        let (response, body) = envelope_of(make(boom), Request::default()).await;

        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
        assert!(!body.to_string().contains("handler bug"), "the panic message must not leak: {body}");
        assert_eq!(response.headers()["x-request-id"].to_str().unwrap(), body["requestId"]);
    }

    #[tokio::test]
    async fn an_unexpected_error_from_poem_keeps_its_status_in_the_error_shape() {
        async fn refuse(_: Request) -> poem::Result<&'static str> {
            Err(poem::Error::from_status(StatusCode::UNSUPPORTED_MEDIA_TYPE))
        }

        let (response, body) = envelope_of(make(refuse), Request::default()).await;

        assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(body["error"]["code"], "REQUEST_FAILED");
    }

    #[tokio::test]
    async fn a_503_always_says_when_to_retry() {
        async fn unavailable(_: Request) -> poem::Result<&'static str> {
            Err(crate::error::ApiError::Unavailable(std::sync::Arc::new(sqlx::Error::PoolTimedOut)).into())
        }

        let (response, body) = envelope_of(make(unavailable), Request::default()).await;

        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "SERVICE_UNAVAILABLE");
        assert!(response.headers().contains_key("retry-after"));
    }
}
