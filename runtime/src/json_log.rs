//! JSON log lines, written directly into the line's buffer.
//!
//! tracing-subscriber's JSON formatter gives every event a `String` for its timestamp
//! and for each formatted field, and writes through a serde serializer adapted to
//! `fmt::Write`: a callgrind count put it at 19,000 instructions per access log line,
//! about a fifth of the API's work for a cached first page. For the events that make
//! up nearly every line, those outside any span and not bridged from the `log` crate,
//! [`JsonLines`] writes the same line (the same keys in the same order, the same
//! escapes, the same numbers) itself; any other event goes to tracing-subscriber's
//! formatter unchanged.

use std::fmt;
use std::fmt::Write as _;

use chrono::{Datelike, Timelike, Utc};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::time::SystemTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use lectern_schema::json::write_str;

/// `{"timestamp":…,"level":…,"fields":{…},"target":…}`, as tracing-subscriber's
/// `json()` writes it.
pub struct JsonLines {
    fallback: Format<Json, SystemTime>,
}

impl JsonLines {
    pub fn new() -> Self {
        Self { fallback: Format::default().json() }
    }
}

impl Default for JsonLines {
    fn default() -> Self {
        Self::new()
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        // Spans add `span` and `spans`, and a bridged `log` record its own metadata:
        // left to the formatter that knows them.
        if event.is_log() || event.parent().is_some() || (event.is_contextual() && ctx.lookup_current().is_some()) {
            return self.fallback.format_event(ctx, writer, event);
        }
        let mut line = Vec::with_capacity(256);
        line.extend_from_slice(b"{\"timestamp\":\"");
        write_now(&mut line);
        line.extend_from_slice(b"\",\"level\":\"");
        line.extend_from_slice(event.metadata().level().as_str().as_bytes());
        line.extend_from_slice(b"\",\"fields\":{");
        let mut fields = Fields { line, first: true };
        event.record(&mut fields);
        let mut line = fields.line;
        line.extend_from_slice(b"},\"target\":");
        write_str(&mut line, event.metadata().target());
        line.extend_from_slice(b"}\n");
        // Every piece above is UTF-8; checked rather than assumed.
        writer.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)
    }
}

/// The current time as tracing-subscriber's `SystemTime` timer writes it:
/// `2026-11-25T02:36:06.860751Z`.
fn write_now(line: &mut Vec<u8>) {
    let now = Utc::now();
    let (date, time) = (now.date_naive(), now.time());
    push_digits(line, u32::try_from(date.year()).unwrap_or(0), 4);
    line.push(b'-');
    push_digits(line, date.month(), 2);
    line.push(b'-');
    push_digits(line, date.day(), 2);
    line.push(b'T');
    push_digits(line, time.hour(), 2);
    line.push(b':');
    push_digits(line, time.minute(), 2);
    line.push(b':');
    push_digits(line, time.second(), 2);
    line.push(b'.');
    // A leap second's nanoseconds run past a second; the clock never reports one.
    push_digits(line, (time.nanosecond() / 1_000).min(999_999), 6);
    line.push(b'Z');
}

/// `value`'s last `width` decimal digits (at most ten), zero-padded.
fn push_digits(line: &mut Vec<u8>, value: u32, width: usize) {
    let mut buffer = [b'0'; 10];
    let digits = &mut buffer[..width.min(10)];
    lectern_schema::timestamp::put_digits(digits, value);
    line.extend_from_slice(digits);
}

/// Writes an event's fields as tracing-serde's `SerdeMapVisitor` does: strings and
/// `Display`/`Debug` values as JSON strings, 64-bit integers, booleans and floats as
/// JSON numbers (a float that is not finite as `null`). Like that visitor it leaves
/// errors and 128-bit integers to `Visit`'s defaults, which format them as text.
struct Fields {
    line: Vec<u8>,
    first: bool,
}

impl Fields {
    fn key(&mut self, field: &Field) {
        if !std::mem::take(&mut self.first) {
            self.line.push(b',');
        }
        write_str(&mut self.line, field.name());
        self.line.push(b':');
    }

    fn number(&mut self, field: &Field, value: impl serde::Serialize) {
        self.key(field);
        // serde_json's number formatting (itoa, ryu), so the line is byte for byte the
        // stock formatter's; writing a number into a Vec cannot fail.
        if serde_json::to_writer(&mut self.line, &value).is_err() {
            self.line.extend_from_slice(b"null");
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        write_str(&mut self.line, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field);
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        write_str(&mut self.line, &text);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.number(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.number(field, value);
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Self;

        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[derive(Debug)]
    struct Failure;

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("pool \"reads\" timed out\nafter 2 s")
        }
    }

    impl std::error::Error for Failure {}

    /// Every kind of field the binaries log, with text JSON must escape.
    fn emit() {
        let error = Failure;
        tracing::info!(
            request_id = %"a1b2\"c3",
            method = %"GET",
            route = "/v1/contacts/{id}",
            status = 200_u16,
            latency_ms = 1.530_630_999_999_999_9_f64,
            tiny = 1e-7_f64,
            not_a_number = f64::NAN,
            negative = -42_i64,
            flag = true,
            debugged = ?vec!["x\u{1}", "é\u{2028}"],
            "request \"served\"\tfine"
        );
        tracing::warn!(error = &error as &(dyn std::error::Error + 'static), "a\\b");
        tracing::error!(count = u64::MAX, wide = i128::MIN, "no other fields");
    }

    fn lines_with(
        format: impl FormatEvent<tracing_subscriber::Registry, tracing_subscriber::fmt::format::JsonFields>
            + Send
            + Sync
            + 'static,
    ) -> String {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt().json().with_writer(lines.clone()).event_format(format).finish();
        tracing::subscriber::with_default(subscriber, emit);
        lines.text()
    }

    /// The timestamps differ between two runs; everything after them must not.
    fn without_timestamps(lines: &str) -> Vec<(String, String)> {
        lines
            .lines()
            .map(|line| {
                let (start, rest) = line.split_at("{\"timestamp\":\"".len());
                let (timestamp, rest) = rest.split_at(rest.find('"').unwrap());
                assert_eq!(start, "{\"timestamp\":\"");
                (timestamp.to_owned(), rest.to_owned())
            })
            .collect()
    }

    #[test]
    fn lines_are_byte_for_byte_those_of_tracing_subscribers_json_formatter() {
        let (ours, stock) = (lines_with(JsonLines::new()), lines_with(Format::default().json()));
        let (ours, stock) = (without_timestamps(&ours), without_timestamps(&stock));
        assert_eq!(ours.len(), 3);
        assert_eq!(
            ours.iter().map(|(_, rest)| rest).collect::<Vec<_>>(),
            stock.iter().map(|(_, rest)| rest).collect::<Vec<_>>()
        );
        for (timestamp, _) in &ours {
            assert_eq!(timestamp.len(), "2026-11-25T02:36:06.860751Z".len(), "{timestamp}");
            let parsed = chrono::DateTime::parse_from_rfc3339(timestamp).unwrap();
            assert!((Utc::now() - parsed.with_timezone(&Utc)).num_seconds().abs() < 60, "{timestamp}");
        }
    }

    #[test]
    fn events_inside_a_span_keep_the_span_fields_of_the_stock_formatter() {
        let lines = Lines::default();
        let subscriber =
            tracing_subscriber::fmt().json().with_writer(lines.clone()).event_format(JsonLines::new()).finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("batch", size = 5_u64);
            let _entered = span.enter();
            tracing::info!("inside");
        });
        let line: serde_json::Value = serde_json::from_str(lines.text().trim_end()).unwrap();
        assert_eq!(line["span"]["name"], "batch");
        assert_eq!(line["span"]["size"], 5);
        assert_eq!(line["fields"]["message"], "inside");
    }
}
