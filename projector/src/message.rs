//! One message as the projector received it, and one it refused.

/// One message as received: where it came from and its raw bytes.
#[derive(Clone, Debug)]
pub struct Received {
    pub subject: String,
    pub stream_sequence: u64,
    pub payload: Vec<u8>,
}

/// A message that broke the contract, or that the database refused, and why.
pub type Refused<'a> = (&'a Received, String);
