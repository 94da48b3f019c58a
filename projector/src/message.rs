//! One message as the projector received it, one it refused, and a span of stream
//! sequences.

/// One message as received: where it came from and its raw bytes.
#[derive(Clone, Debug)]
pub struct Received {
    pub subject: String,
    pub stream_sequence: u64,
    pub payload: Vec<u8>,
}

/// A message that broke the contract, or that the database refused, and why.
pub type Refused<'a> = (&'a Received, String);

/// Stream sequences `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub first: u64,
    pub last: u64,
}

impl Span {
    pub fn events(self) -> u64 {
        self.last - self.first + 1
    }
}

/// A stream sequence as PostgreSQL's `int8` holds it (JetStream's never pass `i64::MAX`).
pub fn as_sequence(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}
