//! The `healthcheck` subcommand of both binaries: container images carry no curl, and
//! an orchestrator's health check should not need one.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The whole probe (connect, request, first line of the answer) must fit in this.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0} is not an http://host:port/path URL")]
    Url(String),
    #[error("{url} did not answer within {PROBE_TIMEOUT:?}")]
    Timeout { url: String },
    #[error("cannot reach {url}")]
    Connect { url: String, source: std::io::Error },
    #[error("{url} answered {status_line:?}, not 200")]
    NotOk { url: String, status_line: String },
}

/// GETs `url` (plain HTTP) and succeeds only on a 200.
pub async fn probe(url: &str) -> Result<(), ProbeError> {
    let (authority, path) = split_url(url).ok_or_else(|| ProbeError::Url(url.to_owned()))?;
    let status_line = tokio::time::timeout(PROBE_TIMEOUT, first_line(authority, path))
        .await
        .map_err(|_| ProbeError::Timeout { url: url.to_owned() })?
        .map_err(|source| ProbeError::Connect { url: url.to_owned(), source })?;
    let status = status_line.split_whitespace().nth(1);
    if status == Some("200") {
        Ok(())
    } else {
        Err(ProbeError::NotOk { url: url.to_owned(), status_line })
    }
}

fn split_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
    (!authority.is_empty() && authority.contains(':')).then_some((authority, path))
}

async fn first_line(authority: &str, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(authority).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::with_capacity(256);
    let mut chunk = [0_u8; 256];
    while !answer.contains(&b'\n') && answer.len() < 4096 {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..read]);
    }
    let text = String::from_utf8_lossy(&answer);
    Ok(text.lines().next().unwrap_or_default().trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn a_probe_url_needs_a_scheme_host_and_port() {
        assert_eq!(split_url("http://127.0.0.1:8080/readyz"), Some(("127.0.0.1:8080", "/readyz")));
        assert_eq!(split_url("http://api:8080"), Some(("api:8080", "/")));
        assert_eq!(split_url("https://api:8080/readyz"), None);
        assert_eq!(split_url("http://api/readyz"), None);
    }
}
