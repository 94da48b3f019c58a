//! Log lines leave the request path: an event appends its line to a shared buffer, and
//! one thread of our own writes the buffer to stderr in one `write` every few
//! milliseconds after the first line of a quiet spell (or sooner, once a burst fills it
//! past [`WRITE_AT`]). The writer sleeps while there is nothing to write.
//!
//! Written straight to stderr, every access log line cost a `write` system call on the
//! tokio worker serving the request, and a stalled reader of stderr (a full pipe to a
//! log shipper) would have stalled the workers themselves. Here a worker only copies the
//! line under a mutex. If the writer falls behind by [`HOLD_AT_MOST`] bytes, new lines
//! are dropped rather than held in memory or waited for; the number dropped is written
//! as a line of its own once the writer catches up.
//!
//! Lines still buffered are written by [`DeferredLog::flush`], which
//! [`super::run_command`] calls before it prints a failure, so that failure comes last.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use tracing_subscriber::fmt::writer::EitherWriter;
use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait in the buffer: short enough for anyone tailing the log.
pub const WRITE_EVERY: Duration = Duration::from_millis(10);
/// A burst this large is written at once rather than at the next tick.
pub const WRITE_AT: usize = 64 * 1024;
/// What may wait for a writer that cannot keep up, before lines are dropped.
pub const HOLD_AT_MOST: usize = 8 * 1024 * 1024;

/// The buffer shared by every event and the thread that writes it out.
#[derive(Clone)]
pub struct DeferredLog {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the writer for a full buffer or a flush.
    wake_writer: Condvar,
    /// Wakes a flush once the writer has written what it waited for.
    written: Condvar,
    hold_at_most: usize,
}

#[derive(Default)]
struct State {
    pending: Vec<u8>,
    dropped: u64,
    /// Bumped once the lines taken from the buffer are written: a flush waits for the
    /// write that takes its lines, after the one in progress if there is one.
    writes: u64,
    writing: bool,
    flush_asked: bool,
}

impl DeferredLog {
    /// Starts the writing thread for stderr.
    pub fn stderr() -> io::Result<Self> {
        Self::start(io::stderr(), HOLD_AT_MOST)
    }

    fn start(target: impl Write + Send + 'static, hold_at_most: usize) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake_writer: Condvar::new(),
            written: Condvar::new(),
            hold_at_most,
        });
        let writer = Arc::clone(&shared);
        thread::Builder::new().name("log-writer".to_owned()).spawn(move || writer.write_forever(target))?;
        Ok(Self { shared })
    }

    /// Appends one formatted event (tracing-subscriber hands over a whole line at once).
    fn append(&self, line: &[u8]) {
        let mut state = self.shared.lock();
        if state.pending.len() + line.len() > self.shared.hold_at_most {
            state.dropped += 1;
            return;
        }
        let before = state.pending.len();
        state.pending.extend_from_slice(line);
        // A notify is a system call whether or not anyone waits, so only the two changes
        // the writer waits for make one: the first line of a quiet spell, and a burst.
        if before == 0 || (before < WRITE_AT && state.pending.len() >= WRITE_AT) {
            self.shared.wake_writer.notify_one();
        }
    }

    /// Returns once every line appended before the call has been handed to the target.
    pub fn flush(&self) {
        let mut state = self.shared.lock();
        let done_after = state.writes + if state.writing { 2 } else { 1 };
        state.flush_asked = true;
        self.shared.wake_writer.notify_one();
        while state.writes < done_after {
            state = self.shared.written.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Shared {
    /// A panic while holding the lock cannot leave the buffer half-updated (every change
    /// is one `extend` or one swap), so a poisoned lock is still good to use.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_forever(&self, mut target: impl Write) {
        let mut writing = Vec::new();
        loop {
            let dropped = {
                let mut state = self.lock();
                while state.pending.is_empty() && !state.flush_asked {
                    state = self.wake_writer.wait(state).unwrap_or_else(PoisonError::into_inner);
                }
                if state.pending.len() < WRITE_AT && !state.flush_asked {
                    // Lets the lines of the next few milliseconds join this one's write.
                    state = self.wake_writer.wait_timeout(state, WRITE_EVERY).unwrap_or_else(PoisonError::into_inner).0;
                }
                std::mem::swap(&mut state.pending, &mut writing);
                state.writing = true;
                state.flush_asked = false;
                std::mem::take(&mut state.dropped)
            };
            if dropped > 0 {
                let _ = writeln!(writing, "{dropped} log lines dropped: stderr was not read fast enough");
            }
            if !writing.is_empty() {
                // Nowhere is left to report a failure to write the log itself.
                let _ = target.write_all(&writing).and_then(|()| target.flush());
                writing.clear();
            }
            let mut state = self.lock();
            state.writes += 1;
            state.writing = false;
            self.written.notify_all();
        }
    }
}

/// What tracing-subscriber writes each event through.
pub struct LineWriter<'a>(&'a DeferredLog);

impl Write for LineWriter<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.0.append(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for DeferredLog {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter(self)
    }
}

/// Where the binaries' events go: the deferred log, or straight to stderr when its
/// thread could not be started.
pub struct LogLines(pub Option<DeferredLog>);

impl<'a> MakeWriter<'a> for LogLines {
    type Writer = EitherWriter<LineWriter<'a>, io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        match &self.0 {
            Some(log) => EitherWriter::A(log.make_writer()),
            None => EitherWriter::B(io::stderr()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A target whose writes arrive on a channel, each as one chunk, and that can be
    /// held up until the test lets it go.
    struct Chunks {
        sent: mpsc::Sender<Vec<u8>>,
        gate: Arc<Mutex<()>>,
    }

    impl Write for Chunks {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let _open = self.gate.lock().unwrap();
            let _ = self.sent.send(bytes.to_vec());
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn started(hold_at_most: usize) -> (DeferredLog, mpsc::Receiver<Vec<u8>>, Arc<Mutex<()>>) {
        let (sent, received) = mpsc::channel();
        let gate = Arc::new(Mutex::new(()));
        let log = DeferredLog::start(Chunks { sent, gate: Arc::clone(&gate) }, hold_at_most).unwrap();
        (log, received, gate)
    }

    fn text(received: &mpsc::Receiver<Vec<u8>>) -> String {
        String::from_utf8(received.try_iter().flatten().collect()).unwrap()
    }

    #[test]
    fn lines_from_many_threads_arrive_whole_and_each_once() {
        let (log, received, _gate) = started(HOLD_AT_MOST);
        thread::scope(|scope| {
            for thread in 0..4 {
                let log = &log;
                scope.spawn(move || {
                    for line in 0..500 {
                        log.make_writer().write_all(format!("thread {thread} line {line}\n").as_bytes()).unwrap();
                    }
                });
            }
        });
        log.flush();
        let text = text(&received);
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2_000);
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines.len(), 2_000, "a line was written twice or split");
        for thread in 0..4 {
            let own: Vec<&str> = text.lines().filter(|line| line.starts_with(&format!("thread {thread} "))).collect();
            let expected: Vec<String> = (0..500).map(|line| format!("thread {thread} line {line}")).collect();
            assert_eq!(own, expected, "one thread's lines must keep their order");
        }
    }

    #[test]
    fn a_quiet_line_is_written_within_a_few_ticks_without_a_flush() {
        let (log, received, _gate) = started(HOLD_AT_MOST);
        log.make_writer().write_all(b"alone\n").unwrap();
        let chunk = received.recv_timeout(WRITE_EVERY * 50).expect("the line was never written");
        assert_eq!(chunk, b"alone\n");
    }

    #[test]
    fn a_flush_returns_only_once_earlier_lines_are_written() {
        let (log, received, _gate) = started(HOLD_AT_MOST);
        for round in 0..50 {
            log.make_writer().write_all(format!("round {round}\n").as_bytes()).unwrap();
            log.flush();
            assert!(
                text(&received).ends_with(&format!("round {round}\n")),
                "round {round} was not written by its flush"
            );
        }
    }

    #[test]
    fn a_stalled_target_drops_lines_past_the_limit_and_says_how_many() {
        let (log, received, gate) = started(100);
        let held = gate.lock().unwrap();
        // The writer may take the first line before it blocks on the gate; the buffer
        // then holds ten lines of ten bytes, and the rest are dropped.
        log.make_writer().write_all(b"line 0000\n").unwrap();
        thread::sleep(WRITE_EVERY * 5);
        for line in 1..=30 {
            log.make_writer().write_all(format!("line {line:04}\n").as_bytes()).unwrap();
        }
        drop(held);
        log.flush();
        let text = text(&received);
        let kept = text.lines().filter(|line| line.starts_with("line ")).count();
        let dropped: usize = text
            .lines()
            .find_map(|line| line.strip_suffix(" log lines dropped: stderr was not read fast enough"))
            .expect("the drop was not reported")
            .parse()
            .unwrap();
        assert_eq!(kept + dropped, 31);
        assert!((10..=11).contains(&kept), "kept {kept} lines, the limit holds ten");
    }
}
