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
        let mut problems = problems(request, C::PARAMETERS);
        if C::PATH_ENDS_IN_ID {
            let id = request.uri().path().rsplit('/').next().unwrap_or_default();
            if decode(id).and_then(|id| uuid::Uuid::try_parse(&id).ok()).is_none() {
                problems.insert(0, "id: must be a UUID".to_owned());
            }
        }
        match problems.len() {
            0 => Ok(Self(PhantomData)),
            1 => {
                Err(ApiError::Validation { message: format!("Invalid request: {}", problems[0]), details: problems }
                    .into())
            }
            n => Err(ApiError::Validation {
                message: format!("Invalid request: {n} problems, listed in details."),
                details: problems,
            }
            .into()),
        }
    }
}

/// Longest parameter name echoed back in a message.
const MAX_ECHOED_NAME: usize = 64;

fn problems(request: &Request, allowed: &[Parameter]) -> Vec<String> {
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
            Some(value) => {
                if let Err(problem) = check(&value) {
                    problems.push(format!("{known}: {problem}"));
                }
            }
        }
    }
    problems
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
        problems(&Request::builder().uri(uri.parse().unwrap()).finish(), ALLOWED)
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
    fn invalid_utf8_is_a_problem_not_a_replacement() {
        assert!(check("/x?a=%FF")[0].starts_with("a: value is not valid UTF-8"));
    }
}
