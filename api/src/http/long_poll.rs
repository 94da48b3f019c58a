//! The shell's side of a long poll: a feed operation that answers "wait" leaves its
//! [`Parked`] record in the request's [`WaitSlot`] (offered to every request: whether a
//! request waits is decided by the feed from its parsed parameters, not by the shell from
//! the query's spelling), and the request's stack unwinds. The envelope then holds the
//! request as one [`LongPoll`]: the record and how its response leaves (the envelope's own
//! finish, captured). It waits in the envelope over HTTP/2, or in its connection's task over
//! HTTP/1.1, handed over through the connection's [`DetachSlot`] (see `server::detach`);
//! when its feed moves it asks the record for its next answer directly, without sending the
//! request through the stack again.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::FutureExt;
use poem::Response;
use tokio::sync::Notify;

use super::payload::json_response;
use super::request_id::RequestId;
use crate::feed::waiting::{Answer, Parked};

/// What a pass through the application ended with: a response, an error, or a panic.
pub type Passed = std::thread::Result<poem::Result<Response>>;

/// How a request's response leaves, whichever pass made it: the envelope's finish.
pub type Finish = Box<dyn FnOnce(Passed) -> Response + Send>;

/// Where a feed operation leaves the request it parked, for the envelope.
#[derive(Clone, Default)]
pub struct WaitSlot(Arc<Mutex<Option<Box<Parked>>>>);

impl WaitSlot {
    /// The body of `answer`: a page's, or, for a wait, the record left here and an empty
    /// body, which the envelope never sends.
    pub fn body_of(&self, answer: Answer) -> Vec<u8> {
        match answer {
            Answer::Page(body) => body,
            Answer::Wait(parked) => {
                *self.lock() = Some(parked);
                Vec::new()
            }
        }
    }

    /// The request parked by the pass that just ended, if it was.
    pub fn take(&self) -> Option<Box<Parked>> {
        self.lock().take()
    }

    fn lock(&self) -> MutexGuard<'_, Option<Box<Parked>>> {
        // Plain moves of a value in and out: a poisoned lock still holds a valid one.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A waiting request, all of it: its feed's record, and how its response leaves.
pub struct LongPoll {
    parked: Box<Parked>,
    request_id: RequestId,
    /// A `HEAD` request: its connection's task writes the head alone.
    pub head_only: bool,
    finish: Finish,
}

impl LongPoll {
    pub fn new(parked: Box<Parked>, request_id: RequestId, head_only: bool, finish: Finish) -> Self {
        Self { parked, request_id, head_only, finish }
    }

    /// Waits until the request is worth looking at again.
    pub async fn until_worth_looking(&mut self) {
        self.parked.until_worth_looking().await;
    }

    /// The response now, or the long poll back when what woke it let nothing through.
    pub async fn answer(self) -> Result<Response, Self> {
        let Self { parked, request_id, head_only, finish } = self;
        // Boxed: the record stays small while it waits; the look is as large as a read.
        let answered = request_id.clone().scope(AssertUnwindSafe(Box::pin(parked.answer())).catch_unwind()).await;
        let passed = match answered {
            Ok(Ok(Answer::Wait(parked))) => return Err(Self { parked, request_id, head_only, finish }),
            Ok(Ok(Answer::Page(body))) => Ok(Ok(json_response(body))),
            Ok(Err(error)) => Ok(Err(error.into())),
            Err(panic) => Err(panic),
        };
        Ok(request_id.sync_scope(|| finish(passed)))
    }

    /// The response, once the feed moved and let something through, or the wait ended.
    pub async fn answered(mut self) -> Response {
        loop {
            self.until_worth_looking().await;
            match self.answer().await {
                Ok(response) => return response,
                Err(again) => self = again,
            }
        }
    }
}

/// Where the envelope leaves a long poll for its connection's task (one per HTTP/1.x
/// connection, in the data of its requests).
#[derive(Default)]
pub struct DetachSlot {
    detached: Mutex<Option<LongPoll>>,
    arrived: Notify,
}

impl DetachSlot {
    /// Leaves `long_poll` for the connection's task and wakes it.
    pub fn hand_over(&self, long_poll: LongPoll) {
        *self.lock() = Some(long_poll);
        self.arrived.notify_one();
    }

    /// The long poll handed over.
    pub async fn arrived(&self) -> LongPoll {
        loop {
            if let Some(long_poll) = self.lock().take() {
                return long_poll;
            }
            self.arrived.notified().await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<LongPoll>> {
        self.detached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
