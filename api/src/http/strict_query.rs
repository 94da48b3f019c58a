//! The strict request gate: poem-openapi ignores unknown query parameters and takes
//! the first of repeated ones, and would report only the first bad value. This
//! extractor runs after authentication and before parameter parsing, and reports
//! every problem at once, each naming its parameter: unknown or repeated parameters,
//! any attempt to choose a workspace, bad values, and a body on a GET.

use std::marker::PhantomData;
use std::str::FromStr;

use percent_encoding::percent_decode_str;
use poem::http::header;
use poem::{FromRequest, Request, RequestBody};

use crate::error::ApiError;

/// The query parameters an operation accepts, with the parser of each value.
/// A test checks these against the OpenAPI document, so the two cannot drift apart.
pub trait QueryContract: Send + Sync + 'static {
    const PARAMETERS: &'static [Parameter];
    /// Whether the path ends in a record id, checked here too so that a bad id and a
    /// bad query parameter are reported together.
    const PATH_ENDS_IN_ID: bool = false;

    /// What is wrong with the cursor of `query` (the accepted parameters, decoded), if
    /// anything. Asked only when the query has other problems, so that one answer lists
    /// them all; the handler opens the cursor of a valid query itself.
    fn cursor_problem(_request: &Request, _query: &[(&'static str, String)]) -> Option<String> {
        None
    }
}

/// Validates one parameter's value, saying what is wrong with it.
pub type ValueCheck = fn(&str) -> Result<(), String>;
/// An accepted query parameter: its name and its value check.
pub type Parameter = (&'static str, ValueCheck);

/// The value check for a parameter of type `T`: the same parser the operation uses.
pub fn parses_as<T: FromStr<Err = String>>(value: &str) -> Result<(), String> {
    value.parse::<T>().map(drop)
}

/// Passes only requests whose query and body are exactly what `C` allows.
#[derive(Debug)]
pub struct StrictQuery<C>(PhantomData<C>);

impl<'a, C: QueryContract> FromRequest<'a> for StrictQuery<C> {
    async fn from_request(request: &'a Request, _body: &mut RequestBody) -> poem::Result<Self> {
        let (mut problems, accepted) = problems(request, C::PARAMETERS);
        if C::PATH_ENDS_IN_ID {
            let id = request.uri().path().rsplit('/').next().unwrap_or_default();
            if decode(id).and_then(|id| uuid::Uuid::try_parse(&id).ok()).is_none() {
                problems.insert(0, "id: must be a UUID".to_owned());
            }
        }
        if !problems.is_empty() {
            problems.extend(C::cursor_problem(request, &accepted));
        }
        match validation_error(problems) {
            None => Ok(Self(PhantomData)),
            Some(error) => Err(error.into()),
        }
    }
}

/// Longest parameter name echoed back in a message.
const MAX_ECHOED_NAME: usize = 64;
/// Problems listed in `details` at most; the message says how many there were.
pub const MAX_DETAILS: usize = 20;

/// The 400 for `problems`, or `None` when there are none. The same problem given many
/// times (a query of thousands of `a&a&…`) is listed once, and the list is cut at
/// [`MAX_DETAILS`], so the answer stays small whatever the request.
fn validation_error(mut problems: Vec<String>) -> Option<ApiError> {
    let mut seen = std::collections::HashSet::new();
    problems.retain(|problem| seen.insert(problem.clone()));
    let message = match problems.len() {
        0 => return None,
        1 => format!("Invalid request: {}", problems[0]),
        n if n <= MAX_DETAILS => format!("Invalid request: {n} problems, listed in details."),
        n => format!(
            "Invalid request: {n} problems; the first {MAX_DETAILS} are listed in details, {} left out.",
            n - MAX_DETAILS
        ),
    };
    problems.truncate(MAX_DETAILS);
    Some(ApiError::Validation { message, details: problems })
}

/// The problems of the query and body, and the accepted parameters with their values.
fn problems(request: &Request, allowed: &[Parameter]) -> (Vec<String>, Vec<(&'static str, String)>) {
    let mut accepted = Vec::new();
    let mut problems = Vec::new();
    if has_body(request) {
        problems.push("body: a GET request takes no body (the workspace always comes from the API key)".to_owned());
    }
    let mut seen: Vec<&str> = Vec::new();
    for pair in request.uri().query().unwrap_or_default().split('&').filter(|pair| !pair.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(name) = decode(raw_name) else {
            problems.push(format!("{}: parameter name is not valid UTF-8", echo(raw_name)));
            continue;
        };
        if is_workspace_override(&name) {
            problems.push(format!(
                "{}: the workspace comes from the API key and cannot be chosen in the request",
                echo(&name)
            ));
            continue;
        }
        let Some(&(known, check)) = allowed.iter().find(|(candidate, _)| *candidate == name) else {
            let names: Vec<&str> = allowed.iter().map(|(name, _)| *name).collect();
            let accepted = if names.is_empty() { "none".to_owned() } else { names.join(", ") };
            problems.push(format!("{}: unknown query parameter (accepted: {accepted})", echo(&name)));
            continue;
        };
        if seen.contains(&known) {
            problems.push(format!("{known}: given more than once; give it once"));
            continue;
        }
        seen.push(known);
        match decode(raw_value) {
            None if known == "cursor" => problems.push(
                "cursor: is not a cursor issued by this API (not valid UTF-8); start a new traversal without `cursor`"
                    .to_owned(),
            ),
            None => problems.push(format!("{known}: value is not valid UTF-8")),
            Some(value) => match check(&value) {
                Ok(()) => accepted.push((known, value)),
                Err(problem) => problems.push(format!("{known}: {problem}")),
            },
        }
    }
    (problems, accepted)
}

/// Form decoding as poem-openapi does it (`+` is a space), but refusing invalid UTF-8
/// instead of replacing it.
fn decode(raw: &str) -> Option<String> {
    let spaced = raw.replace('+', " ");
    percent_decode_str(&spaced).decode_utf8().ok().map(|text| text.into_owned())
}

fn is_workspace_override(name: &str) -> bool {
    name.to_lowercase().contains("workspace")
}

fn echo(name: &str) -> String {
    if name.chars().count() > MAX_ECHOED_NAME {
        format!("{}…", name.chars().take(MAX_ECHOED_NAME).collect::<String>())
    } else {
        name.to_owned()
    }
}

fn has_body(request: &Request) -> bool {
    let declared_length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .map(|value| value.to_str().ok().and_then(|text| text.trim().parse::<u64>().ok()) != Some(0));
    declared_length.unwrap_or(false) || request.headers().contains_key(header::TRANSFER_ENCODING)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &str) -> Result<(), String> {
        Ok(())
    }

    fn small(value: &str) -> Result<(), String> {
        if value.len() < 3 {
            Ok(())
        } else {
            Err("too long".to_owned())
        }
    }

    const ALLOWED: &[Parameter] = &[("a", ok), ("b", small)];

    fn check(uri: &str) -> Vec<String> {
        problems(&Request::builder().uri(uri.parse().unwrap()).finish(), ALLOWED).0
    }

    #[test]
    fn accepted_parameters_pass() {
        assert!(check("/x?a=1&b=22").is_empty());
        assert!(check("/x").is_empty());
        assert!(check("/x?&a=1&").is_empty());
    }

    #[test]
    fn every_problem_is_reported_with_its_parameter() {
        let found = check("/x?zz=1&a=1&a=2&b=long&workspaceId=w");
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[0].starts_with("zz: unknown"));
        assert!(found[1].starts_with("a: given more than once"));
        assert!(found[2].starts_with("b: too long"));
        assert!(found[3].starts_with("workspaceId: the workspace comes from the API key"));
    }

    #[test]
    fn workspace_overrides_are_recognised_in_any_spelling() {
        for name in ["workspace", "workspaceId", "workspace_id", "WORKSPACE-ID", "filter%5Bworkspace%5D"] {
            let found = check(&format!("/x?{name}=1"));
            assert!(found[0].contains("comes from the API key"), "{name}: {found:?}");
        }
    }

    #[test]
    fn thousands_of_problems_are_listed_once_each_and_cut_with_a_count_of_the_rest() {
        let query = (0..4_000).map(|index| format!("p{}=1", index % 30)).collect::<Vec<_>>().join("&");
        let Some(ApiError::Validation { message, details }) = validation_error(check(&format!("/x?{query}"))) else {
            panic!("no validation error")
        };
        assert_eq!(details.len(), MAX_DETAILS);
        assert!(message.contains("30 problems") && message.contains("10 left out"), "{message}");
    }

    #[test]
    fn invalid_utf8_is_a_problem_not_a_replacement() {
        assert!(check("/x?a=%FF")[0].starts_with("a: value is not valid UTF-8"));
    }
}
