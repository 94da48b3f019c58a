//! One page as it is served. A listing fetches one record more than asked, and the extra
//! one says whether a next page exists (no count query, no second round trip). The
//! body's `data` array is written once per page read: straight into the response, or
//! kept for the first-page cache.

use lectern_schema::json::{write_str, WriteJson};
use poem_openapi::Object;
use sqlx::postgres::PgRow;

use super::cursor::{CursorScope, CursorSigner};
use super::params::SortKey;
use super::request::{Keyed, Position};
use crate::error::ApiError;
use crate::reads::replicas::WalPosition;
use crate::resources::{Resource, RECORD_BYTES};

/// The contract's Page object.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename = "Page", rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct PageInfo {
    /// True when another page follows; pass `nextCursor` to get it.
    pub has_more: bool,
    /// The cursor of the next page, or null on the last page.
    #[oai(nullable, validator(min_length = 1))]
    pub next_cursor: Option<String>,
}

/// One page as it is served: its records' JSON and where the next page starts. This is
/// what the first-page cache keeps, so a cached page is neither copied nor written again.
#[derive(Debug)]
pub struct RenderedPage {
    /// The body's `data` array.
    data: Box<[u8]>,
    /// The last record's position, when another page follows.
    next: Option<Position>,
    /// Where in the WAL the page was read: its cursor carries it.
    read_at: WalPosition,
}

/// Room for the body around `data`: the page object with its cursor, the request id.
const ENVELOPE_BYTES: usize = 320;

impl RenderedPage {
    /// Cuts `rows` (fetched with `limit + 1`) to the page and writes it.
    pub fn new<R: Resource>(
        rows: &[PgRow],
        limit: usize,
        sort: SortKey,
        read_at: WalPosition,
    ) -> Result<Self, ApiError> {
        let (page, next) = cut::<R>(rows, limit, sort)?;
        let mut data = Vec::with_capacity(2 + page.len() * RECORD_BYTES);
        write_records::<R>(page, &mut data)?;
        Ok(Self { data: data.into_boxed_slice(), next, read_at })
    }

    /// Memory the page takes.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.data.len()
    }

    /// The listing's body `{data, page, requestId}`, with a freshly signed cursor.
    pub fn body(&self, around: &BodyParts<'_>) -> Result<Vec<u8>, ApiError> {
        let mut body = Vec::with_capacity(self.data.len() + ENVELOPE_BYTES);
        around.write(&mut body, self.next.as_ref(), self.read_at, |out| {
            out.extend_from_slice(&self.data);
            Ok(())
        })?;
        Ok(body)
    }
}

/// What a listing's body holds besides its records.
pub struct BodyParts<'a> {
    pub signer: &'a CursorSigner,
    pub scope: &'a CursorScope<'a>,
    pub request_id: &'a str,
}

impl BodyParts<'_> {
    /// The body of a page that is served once and not kept: written straight from its
    /// rows into the response, without a `data` buffer of its own.
    pub fn fresh<R: Resource>(
        &self,
        rows: &[PgRow],
        limit: usize,
        sort: SortKey,
        read_at: WalPosition,
    ) -> Result<Vec<u8>, ApiError> {
        let (page, next) = cut::<R>(rows, limit, sort)?;
        let mut body = Vec::with_capacity(2 + page.len() * RECORD_BYTES + ENVELOPE_BYTES);
        self.write(&mut body, next.as_ref(), read_at, |out| write_records::<R>(page, out))?;
        Ok(body)
    }

    /// `{"data":…,"page":…,"requestId":…}`, the records written by `data`.
    fn write(
        &self,
        body: &mut Vec<u8>,
        next: Option<&Position>,
        read_at: WalPosition,
        data: impl FnOnce(&mut Vec<u8>) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let page = PageInfo {
            has_more: next.is_some(),
            next_cursor: next.map(|next| self.signer.issue_read_at(self.scope, next, read_at)),
        };
        body.extend_from_slice(b"{\"data\":");
        data(body)?;
        body.extend_from_slice(b",\"page\":");
        serde_json::to_writer(&mut *body, &page).map_err(|error| ApiError::Internal(Box::new(error)))?;
        body.extend_from_slice(b",\"requestId\":");
        write_str(body, self.request_id);
        body.push(b'}');
        Ok(())
    }
}

/// `rows` (fetched with `limit + 1`) cut to the page, and where the next page starts
/// when there is one.
fn cut<R: Resource>(rows: &[PgRow], limit: usize, sort: SortKey) -> Result<(&[PgRow], Option<Position>), ApiError> {
    let page = &rows[..rows.len().min(limit)];
    let next = match page.last() {
        Some(last) if rows.len() > limit => Some(R::record(last)?.position(sort)?),
        _ => None,
    };
    Ok((page, next))
}

/// `rows` as the JSON array of a body's `data`.
fn write_records<R: Resource>(rows: &[PgRow], out: &mut Vec<u8>) -> Result<(), ApiError> {
    out.push(b'[');
    for (index, row) in rows.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        R::record(row)?.write_json(out)?;
    }
    out.push(b']');
    Ok(())
}
