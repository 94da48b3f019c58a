//! A webhook receiver on loopback for the tests: records every delivery it is sent (raw
//! headers and body, when it arrived) and answers as the test tells it to, including the
//! ways a receiver can misbehave (an error status, a redirect, hanging, a huge body, a
//! reset connection). Every recorded delivery can be verified with the official Standard
//! Webhooks library ([`verify_with_standardwebhooks`]).
//!
//! Plain HTTP/1.1 on a raw socket, one request per connection (`Connection: close`), so
//! that the misbehaviours are exact: nothing between the test and the bytes.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How the receiver answers one delivery.
#[derive(Clone, Debug)]
pub enum Answer {
    /// This status, empty body.
    Status(u16),
    /// A redirect to this URL (which a sender must not follow).
    Redirect(String),
    /// Reads the request, then says nothing for this long before answering 200.
    Hang(Duration),
    /// 200 with a body of this many bytes, sent slowly.
    HugeBody(usize),
    /// Reads the request, then resets the connection.
    Reset,
}

/// One delivery as it arrived.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: String,
    pub arrived: Instant,
    /// How many deliveries were being received at that moment, this one included.
    pub concurrent: usize,
}

impl Delivery {
    pub fn id(&self) -> &str {
        self.headers.get("webhook-id").map_or("", String::as_str)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("delivery body is not JSON ({error}): {}", self.body))
    }
}

#[derive(Default)]
struct State {
    deliveries: Mutex<Vec<Delivery>>,
    /// Answers for the next deliveries, in order; then `otherwise`.
    script: Mutex<VecDeque<Answer>>,
    otherwise: Mutex<Option<Answer>>,
    receiving: AtomicUsize,
}

/// A receiver listening on 127.0.0.1; stops when dropped.
pub struct Receiver {
    pub url: String,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// A receiver that answers 204 unless told otherwise.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
        let address = listener.local_addr().expect("receiver address");
        let state = Arc::new(State::default());
        let serving = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(receive(stream, serving.clone()));
            }
        });
        Self { url: format!("http://{address}/hooks/lectern"), state, task }
    }

    /// Answers the next deliveries with `answers`, in order.
    pub fn then(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.script.lock().expect("script").extend(answers);
    }

    /// Answers every delivery after the scripted ones with `answer` (`None`: 204).
    pub fn otherwise(&self, answer: Option<Answer>) {
        *self.state.otherwise.lock().expect("otherwise") = answer;
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.deliveries.lock().expect("deliveries").clone()
    }

    /// How many deliveries have arrived so far.
    pub fn count(&self) -> usize {
        self.state.deliveries.lock().expect("deliveries").len()
    }

    /// The deliveries from the `first` on (0: all), without copying the earlier ones.
    pub fn deliveries_from(&self, first: usize) -> Vec<Delivery> {
        self.state.deliveries.lock().expect("deliveries").get(first..).map(<[Delivery]>::to_vec).unwrap_or_default()
    }

    /// Waits until `enough` holds for the deliveries so far, or panics after `within`.
    pub async fn wait_for(&self, within: Duration, what: &str, enough: impl Fn(&[Delivery]) -> bool) -> Vec<Delivery> {
        let deadline = Instant::now() + within;
        loop {
            let deliveries = self.deliveries();
            if enough(&deliveries) {
                return deliveries;
            }
            assert!(Instant::now() < deadline, "{what} not within {within:?}; deliveries: {deliveries:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn receive(mut stream: TcpStream, state: Arc<State>) {
    let Some((headers, body)) = read_request(&mut stream).await else { return };
    let concurrent = state.receiving.fetch_add(1, Ordering::SeqCst) + 1;
    state.deliveries.lock().expect("deliveries").push(Delivery { headers, body, arrived: Instant::now(), concurrent });
    let answer =
        state.script.lock().expect("script").pop_front().or_else(|| state.otherwise.lock().expect("otherwise").clone());
    match answer {
        None => respond(&mut stream, "204 No Content", &[], b"").await,
        Some(Answer::Status(status)) => respond(&mut stream, &format!("{status} Answered"), &[], b"").await,
        Some(Answer::Redirect(to)) => respond(&mut stream, "307 Temporary Redirect", &[("location", &to)], b"").await,
        Some(Answer::Hang(duration)) => {
            tokio::time::sleep(duration).await;
            respond(&mut stream, "200 OK", &[], b"").await;
        }
        Some(Answer::HugeBody(size)) => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n");
            if stream.write_all(head.as_bytes()).await.is_ok() {
                let chunk = vec![b'x'; 64 * 1024];
                let mut sent = 0;
                while sent < size && stream.write_all(&chunk).await.is_ok() {
                    sent += chunk.len();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        Some(Answer::Reset) => {
            // SO_LINGER 0: closing sends a RST instead of a FIN.
            let _ = stream.set_zero_linger();
        }
    }
    state.receiving.fetch_sub(1, Ordering::SeqCst);
}

async fn respond(stream: &mut TcpStream, status: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}

/// The request's headers and body, or `None` if the connection ends first.
async fn read_request(stream: &mut TcpStream) -> Option<(BTreeMap<String, String>, String)> {
    let mut buffer = Vec::new();
    let mut chunk = [0; 8192];
    let end = loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let headers: BTreeMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|length| length.parse().ok()).unwrap_or(0);
    let mut body = buffer[end + 4..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some((headers, String::from_utf8_lossy(&body).into_owned()))
}

/// Verifies every delivery with the official `standardwebhooks` library for Python
/// (`scripts/verify-webhooks.sh`), each against `secrets` (any one may match); panics
/// naming those that fail.
pub async fn verify_with_standardwebhooks(deliveries: &[Delivery], secrets: &[&str]) {
    let verdict = standardwebhooks_verdict(deliveries, secrets).await;
    assert!(
        verdict.verified == deliveries.len(),
        "standardwebhooks verified {} of {} deliveries:\n{}",
        verdict.verified,
        deliveries.len(),
        verdict.report
    );
}

/// How many of `deliveries` the official library verifies with one of `secrets`: for
/// checking that a secret does NOT verify, where [`verify_with_standardwebhooks`] would panic.
pub async fn verified_by_standardwebhooks(deliveries: &[Delivery], secrets: &[&str]) -> usize {
    standardwebhooks_verdict(deliveries, secrets).await.verified
}

/// What the verifier said: how many it verified, and its whole output (which names each
/// delivery it did not).
struct Verdict {
    verified: usize,
    report: String,
}

async fn standardwebhooks_verdict(deliveries: &[Delivery], secrets: &[&str]) -> Verdict {
    let input: Vec<Value> = deliveries
        .iter()
        .map(|delivery| json!({ "secrets": secrets, "headers": delivery.headers, "body": delivery.body }))
        .collect();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/verify-webhooks.sh");
    let mut child = tokio::process::Command::new(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|error| panic!("run {}: {error}", script.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(Value::Array(input).to_string().as_bytes()).await.expect("write the deliveries");
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
        .await
        .expect("the verifier finished in time")
        .expect("the verifier ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    // "verified N" is the last thing it prints, whether all passed (exit 0) or not (exit 1);
    // without it the verifier itself failed (python3 or PyPI unavailable), never a pass.
    let verified = stdout
        .trim()
        .strip_prefix("verified ")
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("the verifier failed ({}):\n{report}", output.status));
    Verdict { verified, report }
}
