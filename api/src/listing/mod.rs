//! Listings (`listContacts`, `listItems`): one page of a workspace's active records, in
//! keyset order, searched or not, with a signed cursor to the next. A resource plugs in
//! with [`crate::resources::Resource`]; nothing here knows contacts or items.
//!
//! - [`params`]: `search`, `cursor`, `limit`, `sort` and the `type` enums' shape.
//! - [`request`]: a validated request and a position in its order.
//! - [`cursor`]: signed, expiring cursors bound to the request that made them.
//! - [`query`]: the one listing statement, and how a search is shaped.
//! - [`workspace_sizes`]: which workspaces are small enough for a search to walk.
//! - [`first_pages`]: unchanged first pages, served from memory.
//! - [`page`]: a page's body, written once from its rows.

pub mod cursor;
pub mod first_pages;
pub mod page;
pub mod params;
pub mod query;
pub mod request;
pub mod workspace_sizes;

use std::sync::Arc;

use uuid::Uuid;

use crate::error::ApiError;
use crate::metric_names::FIRST_PAGE_CACHE;
use crate::reads::replicas::Reads;
use crate::resources::{KindFilter, Resource};
use cursor::{CursorScope, CursorSigner};
use first_pages::{FirstPages, PageKey};
use page::{BodyParts, RenderedPage};
pub use params::{CursorToken, Limit, SearchText, SortKey};
use query::{read_page, SearchShape};
pub use request::{Keyed, ListRequest, Position};
use workspace_sizes::{WalkSettings, WorkspaceSizes};

/// The validated query of a listing operation.
#[derive(Debug)]
pub struct ListParams<K> {
    pub search: Option<SearchText>,
    pub cursor: Option<CursorToken>,
    pub limit: Limit,
    pub kind: K,
    pub sort: SortKey,
}

/// What listings need, shared by every request of a process.
pub struct Listing {
    reads: Arc<Reads>,
    cursors: CursorSigner,
    /// Unchanged first pages, evicted by the read model's change notifications.
    pub first_pages: Arc<FirstPages<RenderedPage>>,
    /// Which workspaces a search walks.
    workspace_sizes: WorkspaceSizes,
}

impl Listing {
    pub fn new(reads: Arc<Reads>, cursors: CursorSigner, walks: WalkSettings) -> Self {
        Self { reads, cursors, first_pages: Arc::default(), workspace_sizes: WorkspaceSizes::new(walks) }
    }

    /// The signer of this process's cursors, for checks made before a request runs.
    pub fn cursors(&self) -> &CursorSigner {
        &self.cursors
    }

    /// The body of one page of `R` in `workspace_id`, answering request `request_id`.
    pub async fn page<R: Resource>(
        &self,
        workspace_id: Uuid,
        params: ListParams<R::Kind>,
        request_id: &str,
    ) -> Result<Vec<u8>, ApiError> {
        let mut request = ListRequest {
            workspace_id,
            search: params.search.and_then(SearchText::into_filter),
            kind: params.kind,
            sort: params.sort,
            limit: params.limit,
            after: None,
        };
        let scope = CursorScope {
            resource: R::NAME,
            workspace_id,
            kind: request.kind.as_str(),
            search: request.search.as_ref().map(SearchText::as_str),
            sort: request.sort,
        };
        let mut seen = 0;
        if let Some(token) = &params.cursor {
            let (position, read_at) = self
                .cursors
                .open_read_at(token.as_str(), &scope)
                .map_err(|problem| ApiError::invalid("cursor", problem))?;
            request.after = Some(position);
            seen = read_at;
        }
        let around = BodyParts { signer: &self.cursors, scope: &scope, request_id };
        if request.after.is_none() && request.search.is_none() {
            self.first_page::<R>(&request).await?.body(&around)
        } else {
            let shape = self.workspace_sizes.shape_for::<R>(self.reads.primary(), &request).await?;
            let read = read_page::<R>(&self.reads, &request, shape, seen).await?;
            around.fresh::<R>(&read.rows, request.limit.get(), request.sort, read.position.unwrap_or(seen))
        }
    }

    /// A first page without search: from the cache when the workspace has not changed
    /// since it was read, else from the database (and then cached).
    async fn first_page<R: Resource>(&self, request: &ListRequest<R::Kind>) -> Result<Arc<RenderedPage>, ApiError> {
        let key = PageKey {
            resource: R::NAME,
            workspace_id: request.workspace_id,
            kind: request.kind.as_str(),
            sort: request.sort,
            limit: u16::try_from(request.limit.get()).unwrap_or(u16::MAX),
        };
        if let Some(page) = self.first_pages.get(&key) {
            metrics::counter!(FIRST_PAGE_CACHE, "result" => "hit").increment(1);
            return Ok(page);
        }
        metrics::counter!(FIRST_PAGE_CACHE, "result" => "miss").increment(1);
        let ticket = self.first_pages.ticket(request.workspace_id);
        // A first page without search: the shape does not apply.
        let read = read_page::<R>(&self.reads, request, SearchShape::Planned, 0).await?;
        let read_at = read.position.unwrap_or(0);
        let page = Arc::new(RenderedPage::new::<R>(&read.rows, request.limit.get(), request.sort, read_at)?);
        self.first_pages.put(key, ticket, page.clone(), page.bytes());
        Ok(page)
    }
}
