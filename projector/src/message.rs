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
