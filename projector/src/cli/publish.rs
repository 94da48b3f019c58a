//! `lectern-projector publish`: events from files, or JSON lines on stdin, checked against
//! the contract all at once, then published to their subjects.

use std::io::Read;

use async_nats::jetstream;
use lectern_schema::events::ChangeEvent;

use super::{write_stdout, PublishArgs};
use crate::error::ProjectorError;
use crate::stream::{self, ensure_stream};

pub async fn publish(args: PublishArgs) -> Result<(), ProjectorError> {
    let mut events = Vec::new();
    if args.files.is_empty() {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|source| ProjectorError::Input { input: "standard input".to_owned(), source })?;
        events.extend(text.lines().filter(|line| !line.trim().is_empty()).map(str::to_owned));
    } else {
        for file in &args.files {
            let text = std::fs::read_to_string(file)
                .map_err(|source| ProjectorError::Input { input: file.display().to_string(), source })?;
            events.push(text);
        }
    }
    // All or nothing: every event is checked before the first is published.
    let events = events
        .into_iter()
        .enumerate()
        .map(|(index, text)| {
            ChangeEvent::decode(text.as_bytes()).map(|event| (event, text)).map_err(|error| {
                ProjectorError::Usage(format!("event {} is not valid, nothing published: {error}", index + 1))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let client = stream::connect_once(&args.nats.nats_url).await?;
    let jetstream = jetstream::new(client);
    ensure_stream(&jetstream, usize::from(args.nats.stream_replicas)).await?;
    let mut published = 0;
    for (event, text) in events {
        let mut headers = async_nats::HeaderMap::new();
        // JetStream stores one copy of a re-published event within its duplicate window.
        headers.insert("Nats-Msg-Id", event.event_id.to_string().as_str());
        jetstream
            .publish_with_headers(event.expected_subject(), headers, text.into_bytes().into())
            .await
            .map_err(ProjectorError::nats("publishing an event"))?
            .await
            .map_err(ProjectorError::nats("awaiting an event's acknowledgement"))?;
        published += 1;
    }
    write_stdout(&format!("published {published} event(s)\n"))
}

#[cfg(test)]
mod tests {
    use super::publish;
    use crate::cli::{NatsArgs, PublishArgs};

    #[tokio::test]
    async fn a_missing_input_file_is_named_as_the_input_that_could_not_be_read() {
        let missing = std::env::temp_dir().join(format!("lectern-no-such-event-{}.json", uuid::Uuid::new_v4()));
        // Nothing listens there; the file is read, and fails, before NATS is dialled.
        let nats = NatsArgs { nats_url: "nats://127.0.0.1:1".to_owned(), stream_replicas: 1 };

        let error = publish(PublishArgs { nats, files: vec![missing.clone()] }).await.expect_err("no such file");

        let text = error.to_string();
        assert!(text.contains(&missing.display().to_string()), "the file is not named: {text}");
        assert!(!text.contains("writing output"), "a failed read is reported as a write: {text}");
        let source = std::error::Error::source(&error).and_then(|source| source.downcast_ref::<std::io::Error>());
        assert_eq!(source.map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound), "{error:?}");
    }
}
