//! The one listing query, shared by every resource: an index range scan per
//! workspace in keyset order, with one row more than the page for `hasMore`.
//!
//! The SQL is assembled from fixed fragments (values are always bound). Each shape
//! of request (sort, type, with or without cursor, with or without search) is its own
//! prepared statement. A listing's generic plan is the keyset index scan; searches run
//! on connections that plan each execution with the actual pattern and workspace
//! (see [`crate::reads::connections`]).
//!
//! A search picks its page of ids first and reads those rows afterwards. The createdAt
//! order index carries the search document, so the inner query can walk the
//! workspace's range of that index and filter the entries without reading a row (cheap
//! in a small workspace, and for a common term, which fills its page quickly), or take
//! the trigram index for a rare term in a large workspace; either way at most one page
//! of rows is read. In a small workspace the walk is the only plan worth having, so
//! there it is written so that one generic plan serves every term ([`SearchShape`]).

use sqlx::postgres::PgRow;
use sqlx::{Postgres, QueryBuilder};

use super::params::SortKey;
use super::request::{ListRequest, Position};
use crate::reads::connections::{PlanMode, ReadConnections, ReadError};
use crate::reads::replicas::{Read, Reads, WalPosition, READ_POSITION};
use crate::resources::{KindFilter, Resource};

/// How a search finds its page of ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchShape {
    /// Planned for each execution with its pattern and workspace: PostgreSQL may take a
    /// trigram index (a rare term in a large workspace) or walk the order index.
    Planned,
    /// A walk through the workspace's range of the createdAt order index, testing each
    /// entry's search document. The statement lower-cases the term once (a sub-select)
    /// instead of having it folded into the plan, so one generic plan serves every
    /// execution. For small workspaces, see [`super::workspace_sizes`].
    Walk,
}

impl SearchShape {
    /// The shape for `request` in a workspace that is small or not: a walk only for a
    /// search in the default order (the order index carries the search document, the
    /// name index does not) and a one-line term (a term with a newline is checked field
    /// by field), and only in a small workspace or for a term too short for the trigram
    /// index.
    pub fn choose<K>(request: &ListRequest<K>, small_workspace: bool) -> Self {
        if Self::walkable(request) && (small_workspace || Self::too_short_for_trigrams(request)) {
            Self::Walk
        } else {
            Self::Planned
        }
    }

    /// A term of one or two characters has no trigram, so no index narrows its search.
    /// Planned, it may become a scan of every workspace's rows (PostgreSQL's estimate
    /// of such a pattern is a guess); walked, it reads only its own workspace's range
    /// of the order index, and a common term stops after a page of matches.
    pub(crate) fn too_short_for_trigrams<K>(request: &ListRequest<K>) -> bool {
        request.search.as_ref().is_some_and(|search| search.as_str().chars().count() < 3)
    }

    pub(crate) fn walkable<K>(request: &ListRequest<K>) -> bool {
        let one_line = request.search.as_ref().is_some_and(|search| !search.as_str().contains('\n'));
        one_line && request.sort == SortKey::CreatedAt
    }

    /// How the statement for `request` is planned: per execution for a planned search,
    /// else PostgreSQL's generic plan (listings and walks).
    pub fn plan_mode<K>(self, request: &ListRequest<K>) -> PlanMode {
        match self.for_request(request) {
            Self::Planned if request.search.is_some() => PlanMode::PerExecution,
            _ => PlanMode::Generic,
        }
    }

    /// A walk asked for a request that cannot be walked is planned instead.
    fn for_request<K>(self, request: &ListRequest<K>) -> Self {
        match self {
            Self::Walk if !Self::walkable(request) => Self::Planned,
            shape => shape,
        }
    }
}

/// The rows of one page, plus one more when another page follows; read them with
/// [`Resource::record`]. `shape` matters for searches only.
pub async fn fetch_page<R: Resource>(
    connections: &ReadConnections,
    request: &ListRequest<R::Kind>,
    shape: SearchShape,
) -> Result<Vec<PgRow>, ReadError> {
    connections.fetch_for(request.workspace_id, shape.plan_mode(request), list_sql::<R>(request, shape).build()).await
}

/// As [`fetch_page`], on a replica that has replayed `seen` and the workspace's latest
/// change when one has (see [`crate::reads::replicas`]), else on the primary.
pub async fn read_page<R: Resource>(
    reads: &Reads,
    request: &ListRequest<R::Kind>,
    shape: SearchShape,
    seen: WalPosition,
) -> Result<Read, ReadError> {
    reads.fetch_for(request.workspace_id, seen, |connections| fetch_page::<R>(connections, request, shape)).await
}

/// The statement for `request`, ending with the position it reads at; public so benchmarks can run the very same SQL.
pub fn list_sql<'a, R: Resource>(request: &'a ListRequest<R::Kind>, shape: SearchShape) -> QueryBuilder<'a, Postgres> {
    let shape = shape.for_request(request);
    let mut sql =
        QueryBuilder::new(format!("select {}, {READ_POSITION} from {} where workspace_id = ", R::COLUMNS, R::NAME));
    sql.push_bind(request.workspace_id);
    // Literal, so the planner matches the partial indexes.
    sql.push(" and status = 'active'");
    if request.search.is_some() {
        // An array rather than `id in (…)`: the page query is planned on its own and its
        // rows are read by one index scan, with no join to plan (about 10 % cheaper).
        sql.push(format!(" and id = any(array(select id from {} where workspace_id = ", R::NAME));
        sql.push_bind(request.workspace_id);
        sql.push(" and status = 'active'");
        push_page_conditions::<R>(&mut sql, request, shape);
        sql.push("))");
        // The ids came in page order, but the scan that reads their rows need not keep it.
        sql.push(order_by(request.sort));
        return sql;
    }
    push_page_conditions::<R>(&mut sql, request, shape);
    sql
}

fn order_by(sort: SortKey) -> &'static str {
    match sort {
        SortKey::CreatedAt => " order by created_at, id",
        SortKey::Name => " order by name, id",
    }
}

/// The type filter, search, keyset position, order and limit of one page.
fn push_page_conditions<'a, R: Resource>(
    sql: &mut QueryBuilder<'a, Postgres>,
    request: &'a ListRequest<R::Kind>,
    shape: SearchShape,
) {
    if let Some(condition) = request.kind.condition() {
        sql.push(" and ").push(condition);
    }
    match (&request.search, shape) {
        (Some(search), SearchShape::Walk) => {
            // A literal substring test, which no trigram index serves: the walk is the
            // only plan. The document is lower-cased with ICU, and so is the term.
            sql.push(" and strpos(search_text, (select lower(");
            sql.push_bind(search.as_str());
            sql.push(" collate \"und-x-icu\") collate \"default\")) > 0");
        }
        (Some(search), SearchShape::Planned) => {
            let pattern = search.like_escaped();
            // Lower-cased with ICU like the indexed document, then back in the default
            // collation: a LIKE in the ICU collation would not match the trigram index.
            sql.push(" and search_text like '%' || (lower(");
            sql.push_bind(pattern.clone());
            sql.push(" collate \"und-x-icu\") collate \"default\") || '%'");
            if search.as_str().contains('\n') {
                // Only a term with a newline can span two fields of the search document.
                sql.push(" and (false");
                for field in R::SEARCH_FIELDS {
                    sql.push(format!(
                        " or (lower({field} collate \"und-x-icu\") collate \"default\") like '%' || (lower("
                    ));
                    sql.push_bind(pattern.clone());
                    sql.push(" collate \"und-x-icu\") collate \"default\") || '%'");
                }
                sql.push(")");
            }
        }
        (None, _) => {}
    }
    match &request.after {
        Some(Position::CreatedAt { at, id }) => {
            sql.push(" and (created_at, id) > (").push_bind(*at).push(", ").push_bind(*id).push(")");
        }
        Some(Position::Name { name, id }) => {
            sql.push(" and (name, id) > (").push_bind(name.as_str()).push(", ").push_bind(*id).push(")");
        }
        None => {}
    }
    sql.push(order_by(request.sort));
    // One extra row tells whether another page exists.
    sql.push(" limit ").push_bind(i64::try_from(request.limit.get() + 1).unwrap_or(i64::MAX));
}
